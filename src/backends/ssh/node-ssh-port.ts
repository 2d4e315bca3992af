import { createHash } from 'node:crypto';

/**
 * The port of a job's inter-node SSH server on an SSH host (src/runner/inter-node-ssh.ts): the
 * host's own sshd keeps port 22 and is never touched. Derived from the run, submission and job,
 * so every node knows every peer's port without asking (no workflow change, no round trip), and a
 * retried start picks the same one. Below Linux's default ephemeral range (32768–60999), so an
 * outgoing connection's port does not take it; a port something else listens on fails the job's
 * start with sshd's own message.
 */
const FIRST = 20_000;
const COUNT = 12_000;

export function nodeSshPort(runId: string, submission: number, jobNum: number): number {
  return FIRST + (createHash('sha256').update(`${runId}\0${submission}\0${jobNum}`).digest().readUInt32BE(0) % COUNT);
}
