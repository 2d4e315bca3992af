import { execFileSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import type { JobUsage } from '../job-usage';
import { isAlive, listPids, readProcStat, type ProcessIdentity, type ProcStat } from './proc';

/**
 * What a local job uses, read on this machine: from the job's own cgroup (job-cgroup.ts; v1 or
 * v2) when it has one, its limit that of the cgroup; else summed over its processes in /proc (the
 * leader's session and process group), its limit the machine's memory.
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

/** `/proc/meminfo`'s MemTotal: what a job without a memory limit may use at most. */
async function nodeMemoryBytes(): Promise<number | null> {
  const match = /^MemTotal:\s+(\d+) kB/m.exec((await readText('/proc/meminfo')) ?? '');
  return match ? Number(match[1]) * 1024 : null;
}

/** The job's cgroup as its usage is read: what it counted so far (null once gone), and its memory limit (null: none). */
export interface CgroupUsageSource {
  read(): Promise<{ cpu_seconds: number; memory_bytes: number } | null>;
  memory_limit_bytes: number | null;
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
export async function readLocalJobUsage(leader: ProcessIdentity, cgroup: CgroupUsageSource | null): Promise<JobUsage | null> {
  const at_ms = Date.now();
  const counted = cgroup ? await cgroup.read() : null;
  if (cgroup && counted && (await isAlive(leader))) {
    return { at_ms, ...counted, memory_limit_bytes: cgroup.memory_limit_bytes ?? (await nodeMemoryBytes()), source: 'cgroup', gpus: [] };
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
