import { execFileSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import type { JobUsage } from '../../metrics/job-usage';
import { listPids, readProcStat, type ProcessIdentity, type ProcStat } from './proc';

/**
 * What a local job uses, read on this machine: from the job's own cgroup (cgroup v2) when its
 * leader is in one other than the worker's, else summed over its processes in /proc (the
 * leader's session and process group).
 */

/** Linux reports CPU time in USER_HZ, 100 on every architecture Node runs on. */
const CLOCK_TICKS_PER_S = 100;

let pageSize: number | null = null;
function pageBytes(): number {
  if (pageSize === null) {
    try {
      pageSize = Number(execFileSync('getconf', ['PAGESIZE'], { encoding: 'utf8' }).trim()) || 4096;
    } catch {
      pageSize = 4096;
    }
  }
  return pageSize;
}

/** One scan of /proc serves every job sampled within the same half second (to find their processes). */
let scan: { at: number; stats: Promise<ProcStat[]> } | null = null;
function processes(): Promise<ProcStat[]> {
  if (scan && Date.now() - scan.at < 500) return scan.stats;
  const stats = listPids().then(async (pids) => (await Promise.all(pids.map((pid) => readProcStat(pid)))).filter((s): s is ProcStat => s !== null && s.state !== 'Z'));
  scan = { at: Date.now(), stats };
  return stats;
}

async function readText(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch {
    return null;
  }
}

/** The cgroup v2 path of a process (`0::/path`), or null. */
export async function cgroupOf(pid: number | 'self'): Promise<string | null> {
  const text = await readText(`/proc/${pid}/cgroup`);
  const line = text?.split('\n').find((l) => l.startsWith('0::'));
  return line ? line.slice(3) : null;
}

/** `memory.max` or `/proc/meminfo`'s MemTotal: what the job may use at most. */
async function nodeMemoryBytes(): Promise<number | null> {
  const match = /^MemTotal:\s+(\d+) kB/m.exec((await readText('/proc/meminfo')) ?? '');
  return match ? Number(match[1]) * 1024 : null;
}

async function fromCgroup(path: string, at_ms: number): Promise<JobUsage | null> {
  const dir = `/sys/fs/cgroup${path}`;
  const [current, max, cpuStat] = await Promise.all([readText(`${dir}/memory.current`), readText(`${dir}/memory.max`), readText(`${dir}/cpu.stat`)]);
  const usec = /^usage_usec (\d+)$/m.exec(cpuStat ?? '');
  if (current === null || !usec) return null;
  const limit = max === null || max.trim() === 'max' ? await nodeMemoryBytes() : Number(max.trim());
  return { at_ms, cpu_seconds: Number(usec[1]) / 1e6, memory_bytes: Number(current.trim()), memory_limit_bytes: limit, source: 'cgroup', gpus: [] };
}

/**
 * A process's proportional set size (shared pages split among the processes that map them), so
 * that the libraries every process of a job maps count once, not once per process; null when
 * unreadable (then its RSS counts).
 */
async function proportionalBytes(pid: number): Promise<number | null> {
  const match = /^Pss:\s+(\d+) kB/m.exec((await readText(`/proc/${pid}/smaps_rollup`)) ?? '');
  return match ? Number(match[1]) * 1024 : null;
}

/** The job's usage now, or null when its leader is gone. */
export async function readLocalJobUsage(leader: ProcessIdentity): Promise<JobUsage | null> {
  const at_ms = Date.now();
  const [own, its] = await Promise.all([cgroupOf('self'), cgroupOf(leader.pid)]);
  if (its !== null && its !== own && its !== '/') {
    const usage = await fromCgroup(its, at_ms);
    if (usage) return usage;
  }
  const found = (await processes()).filter((s) => s.session === leader.pid || s.pgrp === leader.pid);
  if (!found.some((s) => s.pid === leader.pid && s.starttime === leader.starttime)) return null;
  // Read again now: a rate is only as good as the time its counters were read at.
  const before = Date.now();
  const members = (await Promise.all(found.map((s) => readProcStat(s.pid)))).filter((s): s is ProcStat => s !== null && found.some((f) => f.pid === s.pid && f.starttime === s.starttime));
  const at = (before + Date.now()) / 2;
  const ticks = members.reduce((sum, s) => sum + s.cpu_ticks, 0);
  const bytes = await Promise.all(members.map(async (s) => (await proportionalBytes(s.pid)) ?? s.rss_pages * pageBytes()));
  return { at_ms: at, cpu_seconds: ticks / CLOCK_TICKS_PER_S, memory_bytes: bytes.reduce((a, b) => a + b, 0), memory_limit_bytes: await nodeMemoryBytes(), source: 'proc', gpus: [] };
}
