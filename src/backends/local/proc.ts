import { readdir, readFile, readlink } from 'node:fs/promises';

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

/** Inode of the process's network namespace (`net:[4026532…]`), or null. */
export async function netnsInodeOf(pid: number): Promise<number | null> {
  try {
    const match = /^net:\[(\d+)\]$/.exec(await readlink(`/proc/${pid}/ns/net`));
    return match ? Number(match[1]) : null;
  } catch {
    return null;
  }
}
