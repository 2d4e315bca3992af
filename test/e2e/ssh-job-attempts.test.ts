import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Instance, JobFiles, JobRef, PeersFile } from '../../src/backends/backend';
import { SshBackend } from '../../src/fleet/ssh-backend';
import { SshLayout } from '../../src/runner/inter-node-ssh';
import { JobLayout } from '../../src/runner/job-layout';
import { ed25519FromSeed } from '../../src/secrets/ssh-key-pair';
import { groupRequest, jobRef, makeRun, runJobFiles, waitFor, type TestRun } from './local-fixtures';
import { applyFleetYaml, expectAllClean, FAST_SSH, fleetYaml, startSshFleetEnv, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * Attempts of one node on an SSH fleet (real sshd hosts, the fleet's real workflow): a replacement
 * takes another host while the attempt it replaces still holds its own; releaseJob gives back one
 * attempt's host alone (its inter-node SSH server and keys gone, its log kept); peers.json is
 * replaced atomically on the host, never by an older version, and the job reads it through
 * TROUPE_PEERS_FILE.
 */

let env: SshFleetEnv;
let backend: SshBackend;
let fleet: string;
const savedKnownHosts = process.env.TROUPE_KNOWN_HOSTS;
/** Released after the tests even when one fails: a fleet with held hosts is deleted only after a long grace. */
const runs: TestRun[] = [];

beforeAll(async () => {
  env = await startSshFleetEnv([{ name: 'a' }, { name: 'b' }, { name: 'c' }]);
  process.env.TROUPE_KNOWN_HOSTS = env.hosts.knownHostsFile;
  const byAddress = new Map(Object.values(env.hosts.hosts).map((h) => [h.address, h.jobBaseDir]));
  backend = new SshBackend({
    fleets: env.fleets,
    timeouts: FAST_SSH,
    unreachableLimitMs: 3_000,
    releaseGraceSeconds: 1,
    jobBaseDir: ({ hostname }) => byAddress.get(hostname) ?? '/nonexistent',
  });
  fleet = `attempts-${env.taskQueue.slice(-6)}`;
  const state = await applyFleetYaml(env, fleetYaml(env, fleet, ['a', 'b', 'c']));
  expect(state.hosts.map((h) => h.status)).toEqual(['ready', 'ready', 'ready']);
});

afterAll(async () => {
  if (env) {
    for (const run of runs) await backend.releaseRun(run.runId, run.submission).catch(() => undefined);
    await env.fleets.delete(fleet, { force: true }).catch(() => undefined);
    await env.close();
  }
  if (savedKnownHosts === undefined) delete process.env.TROUPE_KNOWN_HOSTS;
  else process.env.TROUPE_KNOWN_HOSTS = savedKnownHosts;
});

const LOOP = 'echo "up rank=$DSTACK_NODE_RANK"; while true; do sleep 0.2; done';

function book(version: number): PeersFile {
  return { version, json: JSON.stringify({ version, groups: [{ name: 'b', nodes: [{ ip: `10.0.0.${version}` }] }] }) };
}

const client = ed25519FromSeed(Buffer.alloc(32, 7));
const hostKey = (jobNum: number) => ed25519FromSeed(Buffer.alloc(32, 20 + jobNum));

/** The job's files as the start activity makes them, with inter-node SSH and a first book. */
function filesOf(run: TestRun, ref: JobRef, ips: string[], peers: PeersFile): JobFiles {
  const files = runJobFiles(run, ref.job_num, ips, backend.jobDirectory(ref));
  const sshPeers = ips.map((ip, jobNum) => ({ ip, hostPublicKey: hostKey(jobNum).publicKey }));
  return { ...files, ssh: { client, host: hostKey(ref.job_num), peers: sshPeers }, peers };
}

async function provision(run: TestRun, jobNum: number, attempt?: number): Promise<{ instance: Instance; ref: JobRef }> {
  const job = run.jobs[jobNum]!;
  const request = { ...groupRequest(run, job.node_group_index, [{ ...job, ...(attempt ? { attempt } : {}) }]), fleets: [fleet] };
  const [instance] = await backend.provision(request);
  return { instance: instance!, ref: { ...jobRef(run, jobNum, instance!), ...(attempt ? { attempt } : {}) } };
}

async function holders(): Promise<Array<string | null>> {
  const state = await env.fleets.state(fleet);
  return state!.hosts.map((h) => (h.holder ? `${h.holder.job_num}/${h.holder.attempt ?? 0}` : null));
}

describe('SSH fleet job attempts', () => {
  it('runs a replacement on another host beside the attempt it replaces, and releases one attempt alone', async () => {
    const run = makeRun([
      { name: 'a', nodes: 1, commands: [LOOP] },
      { name: 'b', nodes: 1, commands: [LOOP] },
    ]);
    runs.push(run);
    // The test hosts share this machine's disk: less than dstack's default 100GB.. may be free.
    for (const group of run.groups) group.resources.disk = { min: 1, max: null };
    const first = [await provision(run, 0), await provision(run, 1)];
    const ips = first.map((p) => p.instance.internal_ip);
    for (const { ref } of first) await backend.startJob(ref, filesOf(run, ref, ips, book(1)));

    const next = await provision(run, 1, 1);
    expect(next.instance.host).not.toBe(first[1]!.instance.host);
    expect(next.instance.host).not.toBe(first[0]!.instance.host);
    expect(next.instance.instance_id).toBe(`${first[1]!.instance.instance_id}:attempt-1`);
    expect((await provision(run, 1, 1)).instance).toEqual(next.instance);
    expect((await provision(run, 1)).instance).toEqual(first[1]!.instance);
    expect((await holders()).filter((h) => h !== null).sort()).toEqual(['0/0', '1/0', '1/1']);
    expect(basename(backend.jobDirectory(next.ref))).toBe(`${basename(backend.jobDirectory(first[1]!.ref))}.attempt-1`);
    await backend.startJob(next.ref, filesOf(run, next.ref, [ips[0]!, next.instance.internal_ip], book(2)));
    for (const ref of [first[1]!.ref, next.ref]) {
      await waitFor('both attempts to log', async () => (await backend.readLog(ref, 0, 1000)).data.includes('up rank=1'));
      expect(await backend.jobState(ref)).toMatchObject({ state: 'running' });
    }

    // Peers: atomic, never older, what the job reads through TROUPE_PEERS_FILE.
    const path = join(backend.jobDirectory(next.ref), JobLayout.peers);
    expect(readFileSync(path, 'utf8')).toBe(book(2).json);
    const inode = statSync(path).ino;
    await backend.writePeers(next.ref, book(4));
    expect(statSync(path).ino).not.toBe(inode);
    await backend.writePeers(next.ref, book(3));
    expect(readFileSync(path, 'utf8')).toBe(book(4).json);
    await Promise.all([9, 5, 12, 6, 11, 7, 10, 8].map((v) => backend.writePeers(next.ref, book(v))));
    expect(readFileSync(path, 'utf8')).toBe(book(12).json);
    expect(statSync(backend.jobDirectory(next.ref)).mode & 0o777).toBe(0o700);
    expect(await backend.exec(next.ref, 'echo "$TROUPE_PEERS_FILE"', 10_000)).toEqual({ exit_code: 0, output: path });
    expect(await backend.exec(next.ref, 'cat "$TROUPE_PEERS_FILE"', 10_000)).toEqual({ exit_code: 0, output: book(12).json });

    // Attempt 0 of job 1 goes; job 0 and attempt 1 run on; its host is free again, its log stays.
    const oldDir = backend.jobDirectory(first[1]!.ref);
    expect(existsSync(join(oldDir, SshLayout.dir))).toBe(true);
    await backend.releaseJob(first[1]!.ref, 1);
    expect(await backend.jobState(first[1]!.ref)).toMatchObject({ state: 'exited' });
    expect(await backend.jobState(first[0]!.ref)).toMatchObject({ state: 'running' });
    expect(await backend.jobState(next.ref)).toMatchObject({ state: 'running' });
    expect(readdirSync(oldDir).sort()).toEqual([JobLayout.exitCode, JobLayout.log, JobLayout.started]);
    expect((await backend.readLog(first[1]!.ref, 0, 1000)).data).toContain('up rank=1');
    expect((await holders()).filter((h) => h !== null).sort()).toEqual(['0/0', '1/1']);
    const oldHost = Object.keys(env.hosts.hosts).find((n) => env.hosts.host(n).address === first[1]!.instance.host);
    expect(await env.hosts.jobProcesses(oldHost!)).toEqual([]);
    // Idempotent; a released attempt's peers are left alone.
    await backend.releaseJob(first[1]!.ref, 1);
    await backend.writePeers(first[1]!.ref, book(20));
    expect(existsSync(join(oldDir, JobLayout.peers))).toBe(false);
    // The freed host takes the next attempt.
    const third = await provision(run, 0, 1);
    expect(third.instance.host).toBe(first[1]!.instance.host);

    await backend.releaseRun(run.runId, run.submission);
    await expectAllClean(env, fleet);
    for (const ref of [first[0]!.ref, next.ref]) {
      expect(readdirSync(backend.jobDirectory(ref)).sort()).toEqual([JobLayout.exitCode, JobLayout.log]);
    }
  });
});
