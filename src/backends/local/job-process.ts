import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { JobLayout as L } from '../../runner/job-layout';
import { BASH } from '../../runner/job-wrapper';
import { environHas, isAlive, listPids, netnsInodeOf, readProcStat, type ProcessIdentity, type ProcStat } from './proc';
import { spawner, type Detached } from './spawner';
import { isErrno, pathExists, writeFileAtomic } from './state-files';

/**
 * A local job's process: started by the wrapper (src/runner/job-wrapper.ts) as the leader of its
 * own session, found again from the files in its directory by any worker process.
 */

/** Who won the job's start claim (`started/` in the job directory). */
export type StartClaim =
  | { kind: 'none' }
  /** Claimed a moment ago; the pid is being written. */
  | { kind: 'pending' }
  | { kind: 'started'; leader: ProcessIdentity }
  | { kind: 'stopped' };

export async function readClaim(jobDir: string): Promise<StartClaim> {
  const dir = join(jobDir, L.started);
  if (!(await pathExists(dir))) return { kind: 'none' };
  try {
    const [pid, starttime] = (await readFile(join(dir, L.pid), 'utf8')).trim().split(' ').map(Number);
    if (pid !== undefined && starttime !== undefined && pid > 0) return { kind: 'started', leader: { pid, starttime } };
  } catch (err) {
    if (!isErrno(err, 'ENOENT')) throw err;
  }
  if (await pathExists(join(dir, L.stopped))) return { kind: 'stopped' };
  return { kind: 'pending' };
}

/** Waits (bounded) until a pending claim shows who won. */
export async function settledClaim(jobDir: string, timeoutMs: number): Promise<StartClaim> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const claim = await readClaim(jobDir);
    if (claim.kind !== 'pending' || Date.now() > deadline) return claim;
    await sleep(20);
  }
}

/** Takes the start claim for a stop, so the commands never start later. False if already claimed. */
export async function claimForStop(jobDir: string): Promise<boolean> {
  await mkdir(jobDir, { recursive: true });
  try {
    await mkdir(join(jobDir, L.started));
  } catch (err) {
    if (isErrno(err, 'EEXIST')) return false;
    throw err;
  }
  await writeFileAtomic(join(jobDir, L.started, L.stopped), `${new Date().toISOString()}\n`);
  return true;
}

export async function readExitCode(jobDir: string): Promise<number | null> {
  try {
    const code = Number((await readFile(join(jobDir, L.exitCode), 'utf8')).trim());
    return Number.isInteger(code) ? code : null;
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null;
    throw err;
  }
}

/** Exit code recorded for a job whose wrapper was killed before it could write one (SIGKILL). */
export const KILLED_EXIT_CODE = 128 + 9;

export async function recordKilled(jobDir: string): Promise<void> {
  if ((await readExitCode(jobDir)) === null) await writeFileAtomic(join(jobDir, L.exitCode), `${KILLED_EXIT_CODE}\n`);
}

export interface SpawnOptions {
  /** Run inside this network namespace (`ip netns exec`). */
  netns: string | null;
  env: Record<string, string>;
}

/**
 * Starts the wrapper detached (a new session: it outlives this worker and leads the job's
 * process group). `exited` tells its exit code when it ends: a wrapper that lost the claim ends at
 * once; one that could not start ends non-zero.
 */
export function spawnWrapper(jobDir: string, opts: SpawnOptions): Detached {
  const wrapper = join(jobDir, L.wrapper);
  const [command, args] = opts.netns ? ['ip', ['netns', 'exec', opts.netns, BASH, wrapper]] : [BASH, [wrapper]];
  // stdin from /dev/null also keeps bash from reading ~/.bashrc (it does when stdin is a socket).
  return spawner.startDetached(command, args, { cwd: jobDir, env: opts.env, log: join(jobDir, L.wrapperLog) });
}

/** How to recognise a job's processes, including ones that left its process group. */
export interface JobProcessTarget {
  /** The wrapper, when it is known. */
  leader: ProcessIdentity | null;
  /** `NAME=value` every process of the job inherits. */
  marker: string;
  /** Inode of the job's own network namespace (netns mode): everything in it is the job's. */
  netnsInode: number | null;
}

/**
 * The job's live processes: its process group and session (while the leader is verified, or while
 * a member carries the marker: a pgid is never reused while in use), anything carrying the
 * marker, and anything in the job's namespace.
 */
export async function findJobProcesses(target: JobProcessTarget): Promise<ProcStat[]> {
  const stats = (await Promise.all((await listPids()).map((pid) => readProcStat(pid)))).filter(
    (s): s is ProcStat => s !== null && s.state !== 'Z' && s.pid !== process.pid && s.pid !== 1,
  );
  const marked = new Set<number>();
  await Promise.all(
    stats.map(async (s) => {
      if (await environHas(s.pid, target.marker)) marked.add(s.pid);
      else if (target.netnsInode !== null && (await netnsInodeOf(s.pid)) === target.netnsInode) marked.add(s.pid);
    }),
  );
  let groupId: number | null = null;
  if (target.leader && (await isAlive(target.leader))) groupId = target.leader.pid;
  else if (target.leader && stats.some((s) => s.pgrp === target.leader?.pid && marked.has(s.pid))) groupId = target.leader.pid;
  return stats.filter((s) => marked.has(s.pid) || (groupId !== null && (s.pgrp === groupId || s.session === groupId)));
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (err) {
    if (!isErrno(err, 'ESRCH')) throw err;
  }
}

function signalAll(procs: readonly ProcStat[], sig: NodeJS.Signals): void {
  const groups = new Set(procs.map((p) => p.pgrp));
  for (const p of procs) {
    // A group of the job's own (its leader's, or one a command made with setsid): signal it whole.
    if (groups.has(p.pid) && p.pgrp === p.pid) signal(-p.pid, sig);
    signal(p.pid, sig);
  }
}

/**
 * SIGTERM to every process of the job, SIGKILL to what is left after the grace period, then waits
 * until none is left. Throws if some survive SIGKILL (e.g. stuck in uninterruptible sleep).
 */
export async function stopJobProcesses(target: JobProcessTarget, graceMs: number): Promise<void> {
  let procs = await findJobProcesses(target);
  if (procs.length === 0) return;
  signalAll(procs, 'SIGTERM');
  const graceEnd = Date.now() + graceMs;
  while (Date.now() < graceEnd) {
    await sleep(Math.min(100, Math.max(graceEnd - Date.now(), 1)));
    procs = await findJobProcesses(target);
    if (procs.length === 0) return;
  }
  const killEnd = Date.now() + 10_000;
  for (;;) {
    signalAll(procs, 'SIGKILL');
    await sleep(50);
    procs = await findJobProcesses(target);
    if (procs.length === 0) return;
    if (Date.now() > killEnd) {
      throw new Error(`processes ${procs.map((p) => p.pid).join(', ')} survive SIGKILL`);
    }
  }
}
