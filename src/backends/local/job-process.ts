import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { JobLayout as L } from '../../runner/job-layout';
import { BASH } from '../../runner/job-wrapper';
import { scanProcesses, type ProcessIdentity, type ProcStat, type ScannedProcess } from './proc';
import { spawner, type Detached } from './spawner';
import { inJobCgroup } from '../cgroup-limits';
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
  /** The job's cgroup (job-cgroup.ts): the `cgroup.procs` files the wrapper's process is written into before anything runs (inJobCgroup). */
  cgroupProcs?: readonly string[];
  /** An argv that runs the wrapper under the job's walls (job-privileges.ts); none when it isolates them itself or they are not applied. */
  confine?: readonly string[];
}

/**
 * Starts the wrapper detached (a new session: it outlives this worker and leads the job's
 * process group). `exited` tells its exit code when it ends: a wrapper that lost the claim ends at
 * once; one that could not start (nor enter its cgroup) ends non-zero.
 */
export function spawnWrapper(jobDir: string, opts: SpawnOptions): Detached {
  const wrapper = join(jobDir, L.wrapper);
  const bash = [...(opts.confine ?? []), BASH, wrapper];
  const argv = opts.netns ? ['ip', 'netns', 'exec', opts.netns, ...bash] : bash;
  const [command = BASH, ...args] = inJobCgroup(opts.cgroupProcs ?? [], argv);
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

/** One scan's processes, looked up by what identifies a job's. */
interface ProcessIndex {
  byPid: Map<number, ScannedProcess>;
  byMarker: Map<string, ScannedProcess[]>;
  byNetns: Map<number, ScannedProcess[]>;
  byGroup: Map<number, ScannedProcess[]>;
  bySession: Map<number, ScannedProcess[]>;
}

function push<K>(map: Map<K, ScannedProcess[]>, key: K, p: ScannedProcess): void {
  const list = map.get(key);
  if (list) list.push(p);
  else map.set(key, [p]);
}

function indexProcesses(procs: readonly ScannedProcess[]): ProcessIndex {
  const index: ProcessIndex = { byPid: new Map(), byMarker: new Map(), byNetns: new Map(), byGroup: new Map(), bySession: new Map() };
  for (const p of procs) {
    index.byPid.set(p.pid, p);
    for (const m of p.markers) push(index.byMarker, m, p);
    if (p.netnsInode !== null) push(index.byNetns, p.netnsInode, p);
    push(index.byGroup, p.pgrp, p);
    push(index.bySession, p.session, p);
  }
  return index;
}

/**
 * The job's live processes in a scan: its process group and session (while the leader is
 * verified, or while a member carries the marker: a pgid is never reused while in use), anything
 * carrying the marker, and anything in the job's namespace.
 */
function jobProcessesIn(index: ProcessIndex, target: JobProcessTarget): ProcStat[] {
  const found = new Set<ScannedProcess>(index.byMarker.get(target.marker) ?? []);
  if (target.netnsInode !== null) for (const p of index.byNetns.get(target.netnsInode) ?? []) found.add(p);
  const leader = target.leader;
  if (leader) {
    const alive = index.byPid.get(leader.pid)?.starttime === leader.starttime;
    const group = index.byGroup.get(leader.pid) ?? [];
    if (alive || group.some((p) => found.has(p))) {
      for (const p of group) found.add(p);
      for (const p of index.bySession.get(leader.pid) ?? []) found.add(p);
    }
  }
  return [...found];
}

function markerName(target: JobProcessTarget): string {
  return target.marker.slice(0, target.marker.indexOf('='));
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

/** Pause between two scans while stops are under way. */
const ROUND_MS = 50;
/** How long processes may outlive SIGKILL before a stop fails. */
const KILL_WAIT_MS = 10_000;

interface StopRequest {
  target: JobProcessTarget;
  graceMs: number;
  /** When SIGKILL follows the SIGTERM; null until the SIGTERM is sent. */
  killAt: number | null;
  resolve: () => void;
  reject: (err: Error) => void;
}

/**
 * Every stop under way in this process shares one scan of /proc per round: stopping a thousand
 * jobs reads /proc a few times, not a thousand times each (a full scan per job exhausted the
 * worker's file descriptors). A stop joins at the next scan, so the scan that finds its job's
 * processes gone started after the stop was asked for.
 */
class JobStops {
  private readonly waiting: StopRequest[] = [];
  private looping = false;

  stop(target: JobProcessTarget, graceMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ target, graceMs, killAt: null, resolve, reject });
      if (!this.looping) {
        this.looping = true;
        void this.loop();
      }
    });
  }

  private async loop(): Promise<void> {
    let active: StopRequest[] = [];
    try {
      while (active.length > 0 || this.waiting.length > 0) {
        active.push(...this.waiting.splice(0));
        let index: ProcessIndex;
        try {
          const procs = await scanProcesses({
            markerNames: new Set(active.map((r) => markerName(r.target))),
            netns: active.some((r) => r.target.netnsInode !== null),
            knownLeaders: active.flatMap((r) => (r.target.leader ? [r.target.leader] : [])),
          });
          index = indexProcesses(procs);
        } catch (err) {
          for (const r of active) r.reject(err instanceof Error ? err : new Error(String(err)));
          active = [];
          continue;
        }
        active = active.filter((r) => this.step(r, jobProcessesIn(index, r.target), Date.now()));
        if (active.length > 0) await sleep(ROUND_MS);
      }
    } finally {
      this.looping = false;
    }
  }

  /** One round of one stop; true while it goes on. */
  private step(r: StopRequest, procs: readonly ProcStat[], now: number): boolean {
    if (procs.length === 0) {
      r.resolve();
      return false;
    }
    try {
      if (r.killAt === null) {
        r.killAt = now + r.graceMs;
        signalAll(procs, 'SIGTERM');
      } else if (now >= r.killAt + KILL_WAIT_MS) {
        throw new Error(`processes ${procs.map((p) => p.pid).join(', ')} survive SIGKILL`);
      } else if (now >= r.killAt) {
        signalAll(procs, 'SIGKILL');
      }
      return true;
    } catch (err) {
      r.reject(err instanceof Error ? err : new Error(String(err)));
      return false;
    }
  }
}

const jobStops = new JobStops();

/**
 * SIGTERM to every process of the job, SIGKILL to what is left after the grace period, then waits
 * until none is left. Throws if some survive SIGKILL (e.g. stuck in uninterruptible sleep).
 * Concurrent stops share their scans of /proc (JobStops).
 */
export function stopJobProcesses(target: JobProcessTarget, graceMs: number): Promise<void> {
  return jobStops.stop(target, graceMs);
}
