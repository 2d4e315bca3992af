import { readFileSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { JobLayout as L } from '../../runner/job-layout';
import { BASH } from '../../runner/job-wrapper';
import { scanProcesses, type ProcessIdentity, type ProcStat, type ScannedProcess } from './proc';
import { spawner, type Detached } from './spawner';
import { inJobCgroup } from '../cgroup-limits';
import { isFdShortage, retryFdShortage } from '../../concurrency/fd-shortage';
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
  /**
   * A cgroup.procs file of the job's cgroup (job-cgroup.ts; with cgroup v1, of one of its
   * hierarchies): the job's processes, while it has one. Null: the job has none.
   */
  cgroupProcs: string | null;
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

/** Shortest pause between two rounds while stops are under way (a round that took longer waits as long again). */
const ROUND_MS = 50;
/** How long processes may outlive SIGKILL before a stop fails. */
const KILL_WAIT_MS = 10_000;
/** Longest a stop whose cgroup is empty waits for others still emptying theirs, so that they share one scan. */
const SWEEP_WAIT_MS = 2_000;

/**
 * Where a stop stands. `cgroup`: its processes are the ones in its cgroup, read each round (a file
 * per job, not every process on the machine). `sweep`: its cgroup is empty; waiting for a scan of
 * /proc that makes sure nothing of the job left it. `scan`: found by scans alone (no cgroup, or
 * processes outside it).
 */
type StopPhase = 'cgroup' | 'sweep' | 'scan';

interface StopRequest {
  target: JobProcessTarget;
  graceMs: number;
  phase: StopPhase;
  /** When the stop entered the sweep phase. */
  sweepSince: number;
  /** When SIGKILL follows the SIGTERM; null until the SIGTERM is sent. */
  killAt: number | null;
  /** Resolved or rejected: leaves the rounds. */
  done?: boolean;
  resolve: () => void;
  reject: (err: Error) => void;
}

/**
 * The pids in a cgroup, or null when it is not there (never made, or removed). Read in place, not
 * by the thread pool: the kernel makes the list in memory at once, and a thousand jobs' lists a
 * round cost milliseconds this way against hundreds queued behind other I/O at load.
 */
function cgroupPids(procsFile: string): number[] | null {
  try {
    return readFileSync(procsFile, 'utf8').split('\n').filter(Boolean).map(Number);
  } catch (err) {
    // Not there, or a path that is no directory (a cgroup the kernel refused).
    if (isErrno(err, 'ENOENT') || isErrno(err, 'ENOTDIR') || isErrno(err, 'ENODEV')) return null;
    throw err;
  }
}

function signalPids(pids: readonly number[], sig: NodeJS.Signals): void {
  for (const pid of pids) signal(pid, sig);
}

/**
 * Every stop under way in this process shares its rounds. A job with a cgroup is stopped by the
 * pids in its cgroup.procs (every process of the job is born in it); once that is empty, one scan
 * of /proc shared by all the stops that got there (they wait for each other up to SWEEP_WAIT_MS)
 * makes sure nothing of the job left it (the marker, the namespace, the session): stopping a
 * thousand jobs reads a thousand small files a round and /proc once, not /proc every round
 * (a scan of ~7,000 processes took seconds at load). A job without a cgroup, or with processes
 * outside it, is stopped by scans alone. A stop joins at the next round, so the look that finds
 * its job's processes gone started after the stop was asked for.
 */
class JobStops {
  private readonly waiting: StopRequest[] = [];
  private looping = false;

  stop(target: JobProcessTarget, graceMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const phase: StopPhase = target.cgroupProcs ? 'cgroup' : 'scan';
      this.waiting.push({ target, graceMs, phase, sweepSince: 0, killAt: null, resolve, reject });
      if (!this.looping) {
        this.looping = true;
        // Once the caller's other stops of this turn are asked for too: they share the first round.
        setImmediate(() => void this.loop());
      }
    });
  }

  private async loop(): Promise<void> {
    let active: StopRequest[] = [];
    try {
      while (active.length > 0 || this.waiting.length > 0) {
        const began = Date.now();
        active.push(...this.waiting.splice(0));
        for (const r of active) if (r.phase === 'cgroup') this.cgroupRound(r);
        const sweeping = active.filter((r) => r.phase === 'sweep');
        const emptying = active.some((r) => r.phase === 'cgroup');
        const scanNow = active.some((r) => r.phase === 'scan') || (sweeping.length > 0 && (!emptying || sweeping.some((r) => Date.now() - r.sweepSince >= SWEEP_WAIT_MS)));
        if (scanNow) await this.scanRound(active.filter((r) => r.phase !== 'cgroup'));
        active = active.filter((r) => !r.done);
        if (active.length > 0) await sleep(Math.max(ROUND_MS, Date.now() - began));
      }
    } finally {
      this.looping = false;
    }
  }

  /** One round of a stop by its cgroup: signals what is in it, or moves on once it is empty. */
  private cgroupRound(r: StopRequest): void {
    let pids: number[] | null;
    try {
      pids = cgroupPids(r.target.cgroupProcs ?? '');
    } catch (err) {
      // No descriptor left this round: the next one looks again.
      if (isFdShortage(err)) return;
      return this.fail(r, err);
    }
    if (pids === null) r.phase = 'scan';
    else if (pids.length === 0) {
      r.phase = 'sweep';
      r.sweepSince = Date.now();
    } else this.step(r, pids, (sig) => signalPids(pids, sig), Date.now());
  }

  /** One scan of /proc for the stops that look by scans, and the ones whose cgroup is empty. */
  private async scanRound(stops: StopRequest[]): Promise<void> {
    let index: ProcessIndex;
    try {
      const procs = await retryFdShortage(() =>
        scanProcesses({
          markerNames: new Set(stops.map((r) => markerName(r.target))),
          netns: stops.some((r) => r.target.netnsInode !== null),
          knownLeaders: stops.flatMap((r) => (r.target.leader ? [r.target.leader] : [])),
        }),
      );
      index = indexProcesses(procs);
    } catch (err) {
      for (const r of stops) this.fail(r, err);
      return;
    }
    const now = Date.now();
    for (const r of stops) {
      const procs = jobProcessesIn(index, r.target);
      if (procs.length === 0) this.finish(r);
      else {
        // Processes that left the job's cgroup (or a job without one): scans from now on.
        r.phase = 'scan';
        this.step(r, procs.map((p) => p.pid), (sig) => signalAll(procs, sig), now);
      }
    }
  }

  /** One round of one stop that found processes: SIGTERM, SIGKILL after the grace, an error once they outlive it. */
  private step(r: StopRequest, pids: readonly number[], send: (sig: NodeJS.Signals) => void, now: number): void {
    try {
      if (r.killAt === null) {
        r.killAt = now + r.graceMs;
        send('SIGTERM');
      } else if (now >= r.killAt + KILL_WAIT_MS) {
        throw new Error(`processes ${pids.join(', ')} survive SIGKILL`);
      } else if (now >= r.killAt) {
        send('SIGKILL');
      }
    } catch (err) {
      this.fail(r, err);
    }
  }

  private finish(r: StopRequest): void {
    r.done = true;
    r.resolve();
  }

  private fail(r: StopRequest, err: unknown): void {
    r.done = true;
    r.reject(err instanceof Error ? err : new Error(String(err)));
  }
}

const jobStops = new JobStops();

/**
 * SIGTERM to every process of the job, SIGKILL to what is left after the grace period, then waits
 * until none is left. Throws if some survive SIGKILL (e.g. stuck in uninterruptible sleep).
 * Concurrent stops share their rounds and scans of /proc (JobStops): stop many jobs at once.
 */
export function stopJobProcesses(target: JobProcessTarget, graceMs: number): Promise<void> {
  return jobStops.stop(target, graceMs);
}
