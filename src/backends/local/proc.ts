import { readFileSync, readlinkSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { mapLimit } from '../../concurrency/map-limit';
import { isFdShortage } from '../../concurrency/fd-shortage';

/** What /proc tells about processes: enough to find a job's processes and to survive pid reuse. */

export interface ProcStat {
  pid: number;
  /** R, S, D, Z, T… */
  state: string;
  pgrp: number;
  session: number;
  /** Clock ticks after boot: with the pid, identifies a process across pid reuse. */
  starttime: number;
  /** User + system CPU time so far, in clock ticks. */
  cpu_ticks: number;
  /** Resident set size, in pages. */
  rss_pages: number;
}

export async function readProcStat(pid: number): Promise<ProcStat | null> {
  let text: string;
  try {
    text = await readFile(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  return parseProcStat(pid, text);
}

/**
 * readProcStat without the thread pool, for scans: /proc/PID/stat is made in memory, without the
 * locks of the process's memory that can hold a read (as /proc/PID/environ's may), and thousands
 * of reads cost milliseconds this way against seconds queued behind other I/O at load.
 */
function readProcStatSync(pid: number): ProcStat | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch (err) {
    // No descriptor left fails the scan (retried) rather than miss a process; else it is gone.
    if (isFdShortage(err)) throw err;
    return null;
  }
  return parseProcStat(pid, text);
}

function parseProcStat(pid: number, text: string): ProcStat {
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const field = (n: number) => Number(rest[n - 3]);
  return { pid, state: rest[0] ?? '?', pgrp: field(5), session: field(6), starttime: field(22), cpu_ticks: field(14) + field(15), rss_pages: field(24) };
}

/** A process identified by pid and start time; zombies count as gone. */
export interface ProcessIdentity {
  pid: number;
  starttime: number;
}

export async function isAlive(proc: ProcessIdentity): Promise<boolean> {
  const stat = await readProcStat(proc.pid);
  return stat !== null && stat.state !== 'Z' && stat.starttime === proc.starttime;
}

export async function listPids(): Promise<number[]> {
  return (await readdir('/proc')).filter((n) => /^\d+$/.test(n)).map(Number);
}

/** True when the process's environment holds exactly `entry` (`NAME=value`). */
export async function environHas(pid: number, entry: string): Promise<boolean> {
  try {
    const environ = await readFile(`/proc/${pid}/environ`, 'latin1');
    return environ.split('\0').includes(entry);
  } catch {
    return false;
  }
}

/** Inode of the process's network namespace (`net:[4026532…]`), or null; read in place as readProcStatSync. */
function netnsInodeOf(pid: number): number | null {
  try {
    const match = /^net:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/ns/net`));
    return match ? Number(match[1]) : null;
  } catch (err) {
    // Gone, or not ours to look at (no CAP_SYS_PTRACE in a container): unknown, as before.
    if (isFdShortage(err)) throw err;
    return null;
  }
}

/** Processes a scan reads in place before it lets other work run. */
const SYNC_READS_PER_TURN = 256;

/** `fn` over `items` in place, SYNC_READS_PER_TURN at a time, the event loop let run between. */
async function inTurns<T, R>(items: readonly T[], fn: (item: T) => R): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += SYNC_READS_PER_TURN) {
    if (i > 0) await new Promise((resolve) => setImmediate(resolve));
    for (const item of items.slice(i, i + SYNC_READS_PER_TURN)) out.push(fn(item));
  }
  return out;
}

/** Files of /proc read at once by a scan: a scan of thousands of processes holds a few dozen descriptors, never thousands. */
const PROC_READS_IN_FLIGHT = 32;

/** One process as a scan saw it. */
export interface ScannedProcess extends ProcStat {
  /** The entries of its environment named in the scan's `markerNames` (`NAME=value`). */
  markers: string[];
  /** Its network namespace's inode, when the scan asked for it. */
  netnsInode: number | null;
}

export interface ScanOptions {
  /** Environment variables to read (the marker a job's processes inherit); none: environments are not read. */
  markerNames: ReadonlySet<string>;
  /** Read each process's network namespace too. */
  netns: boolean;
  /**
   * Leaders whose session and process group are found by those alone: while a leader is alive
   * (same pid and start time), the environments of its session's processes are not read (their
   * `markers` are empty). A thousand jobs' processes then cost one read each per scan, not two.
   */
  knownLeaders?: readonly ProcessIdentity[];
}

/**
 * Every live process (zombies, pid 1 and this process left out), read once with a bounded number
 * of files open: what stopping a whole run's jobs needs, instead of one full pass over /proc per job.
 */
export async function scanProcesses(opts: ScanOptions): Promise<ScannedProcess[]> {
  const stats = await inTurns(await listPids(), (pid): ProcStat | null => {
    if (pid === 1 || pid === process.pid) return null;
    const stat = readProcStatSync(pid);
    return stat && stat.state !== 'Z' ? stat : null;
  });
  const live = stats.filter((p): p is ProcStat => p !== null);
  const byPid = new Map(live.map((p) => [p.pid, p]));
  const leaders = new Set((opts.knownLeaders ?? []).filter((l) => byPid.get(l.pid)?.starttime === l.starttime).map((l) => l.pid));
  const netns = opts.netns ? await inTurns(live, (stat) => netnsInodeOf(stat.pid)) : [];
  return await mapLimit(live, PROC_READS_IN_FLIGHT, async (stat, i): Promise<ScannedProcess> => {
    const known = leaders.has(stat.session) || leaders.has(stat.pgrp);
    const markers = opts.markerNames.size > 0 && !known ? await environEntries(stat.pid, opts.markerNames) : [];
    return { ...stat, markers, netnsInode: netns[i] ?? null };
  });
}

/** The entries of the process's environment whose names are in `names`. */
async function environEntries(pid: number, names: ReadonlySet<string>): Promise<string[]> {
  let environ: string;
  try {
    environ = await readFile(`/proc/${pid}/environ`, 'latin1');
  } catch {
    return [];
  }
  return environ.split('\0').filter((entry) => {
    const eq = entry.indexOf('=');
    return eq > 0 && names.has(entry.slice(0, eq));
  });
}
