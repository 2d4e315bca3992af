import { z } from 'zod';
import type { Range, Resources } from '../config/resources-schema';
import { BASH } from '../runner/job-wrapper';

/**
 * A job's limits, in a cgroup of its own (the pure half, shared by the local fleet and SSH hosts:
 * which hierarchy, what to write where; local/job-cgroup.ts does it on this machine). Memory (and swap where the hierarchy accounts it) and CPU come from the
 * group's `resources` as a Kubernetes request = limit: a range's upper bound where it has one, else
 * its lower bound, so dstack's default `memory: 8GB..` is a limit of 8 GiB and `cpu: 2..` one of 2
 * CPUs. The pids limit is Troupe's own (dstack has no such field).
 */

/** Processes (and threads) a job may have at once unless the worker says otherwise (TROUPE_LOCAL_PIDS_MAX, TROUPE_SSH_PIDS_MAX). */
export const DEFAULT_PIDS_MAX = 4096;
/** Every job's cgroup lives under this one, in each hierarchy: the worker's own cgroups are never touched. */
export const CGROUP_PARENT = 'troupe';
const CPU_PERIOD_US = 100_000;
const CONTROLLERS = ['memory', 'cpu', 'pids'] as const;

/**
 * `delegated`: the job cgroups' parent is a subtree an admin gave a user who is not root (a path
 * relative to each mount, already there and the user's), instead of CGROUP_PARENT made by root: the
 * plan then makes only the job's own directory and writes nothing outside the subtree.
 */
export type CgroupHierarchy =
  /** cgroup v2: one tree, the controllers enabled in it. */
  | { version: 2; root: string; delegated?: string }
  /** cgroup v1: a mount per controller (cpuacct, where CPU time is read, may be its own or cpu's). */
  | { version: 1; memory: string; cpu: string; pids: string; cpuacct: string | null; delegated?: string }
  /** No usable hierarchy: jobs run without limits, and their logs say why. */
  | { version: null; why: string };

/**
 * Which hierarchy holds a job's limits, from /proc/self/mounts: cgroup v2 when memory, cpu and pids
 * are all among its controllers (`controllersOf(mountPoint)`: its cgroup.controllers), else v1
 * when each of them has a v1 mount, else none (and why).
 */
export function detectCgroups(mounts: string, controllersOf: (mountPoint: string) => string | null, isRoot: boolean): CgroupHierarchy {
  if (!isRoot) return { version: null, why: 'the worker is not root' };
  const v1 = new Map<string, string>();
  const v2: string[] = [];
  for (const line of mounts.split('\n')) {
    const [, mountPoint, type, options] = line.split(' ');
    if (!mountPoint || !options) continue;
    if (type === 'cgroup2') v2.push(mountPoint);
    if (type === 'cgroup') for (const option of options.split(',')) if (!v1.has(option)) v1.set(option, mountPoint);
  }
  for (const root of v2) {
    const have = (controllersOf(root) ?? '').split(/\s+/);
    if (CONTROLLERS.every((c) => have.includes(c))) return { version: 2, root };
  }
  const [memory, cpu, pids] = CONTROLLERS.map((c) => v1.get(c));
  if (memory && cpu && pids) return { version: 1, memory, cpu, pids, cpuacct: v1.get('cpuacct') ?? null };
  const missing = CONTROLLERS.filter((c) => !v1.has(c));
  return {
    version: null,
    why: `no cgroup hierarchy has the memory, cpu and pids controllers (${v2.length > 0 ? `cgroup v2 at ${v2.join(', ')} lacks some; ` : ''}cgroup v1 lacks ${missing.join(', ')})`,
  };
}

/** What a job may use (kept in its instance record); null is no limit. */
export const JobLimitsSchema = z.object({
  memory_bytes: z.number().int().positive().nullable(),
  cpus: z.number().positive().nullable(),
  pids: z.number().int().positive(),
});
export type JobLimits = z.infer<typeof JobLimitsSchema>;

/** The upper bound of a range where it has one, else its lower bound; nothing (or 0) is no limit. */
function limitOf(range: Range): number | null {
  const value = range.max ?? range.min;
  return value !== null && value > 0 ? value : null;
}

export function jobLimits(resources: Pick<Resources, 'cpu' | 'memory'>, pids: number): JobLimits {
  const gb = limitOf(resources.memory);
  return { memory_bytes: gb === null ? null : Math.round(gb * 1024 ** 3), cpus: limitOf(resources.cpu.count), pids };
}

/** Where a worker's environment sets the pids limit of its jobs, per kind of node. */
export type PidsMaxVariable = 'TROUPE_LOCAL_PIDS_MAX' | 'TROUPE_SSH_PIDS_MAX';

/** The pids limit a worker's environment asks for (`variable`), else the default; refuses anything but a whole number ≥ 1. */
export function pidsMaxFrom(env: Record<string, string | undefined>, variable: PidsMaxVariable = 'TROUPE_LOCAL_PIDS_MAX'): number {
  const text = env[variable];
  if (text === undefined || text === '') return DEFAULT_PIDS_MAX;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${variable === 'TROUPE_SSH_PIDS_MAX' ? 'ssh fleets' : 'local fleet'}: ${variable} must be a whole number ≥ 1, not "${text}"`);
  return n;
}

/** One file written to set a limit; `optional` ones may be absent (swap not accounted). */
export interface CgroupWrite {
  file: string;
  value: string;
  optional?: boolean;
}

/** Where a job's cgroup is and what makes it: directories (parents first), writes in order, and the files its processes join by. */
export interface CgroupPlan {
  dirs: string[];
  writes: CgroupWrite[];
  /** `cgroup.procs` of each directory: a pid written there moves that process in. */
  procs: string[];
  /** Where the kernel counts OOM kills (`oom_kill N`). */
  oomFile: string;
  /** The job's CPU time: v2 cpu.stat (`usage_usec`), v1 cpuacct.usage (ns); null when v1 has no cpuacct. */
  cpuFile: { path: string; unit: 'usage_usec' | 'ns' } | null;
  /** The memory the job uses now: its count (page cache included) and the stat whose inactive file pages it may drop (workingSetBytes). */
  memory: { usage: string; stat: string; inactiveFile: 'inactive_file' | 'total_inactive_file' };
}

/** The job cgroups' parent, relative to each mount: CGROUP_PARENT, or the subtree delegated to a user. */
export function cgroupParentOf(h: Exclude<CgroupHierarchy, { version: null }>): string {
  return h.delegated ?? CGROUP_PARENT;
}

/** The directory every job's cgroup is made in, in each mount of the hierarchy (one per v1 mount). */
export function cgroupParents(h: Exclude<CgroupHierarchy, { version: null }>): string[] {
  const mounts = h.version === 2 ? [h.root] : [h.memory, h.cpu, h.pids, ...(h.cpuacct ? [h.cpuacct] : [])];
  return [...new Set(mounts)].map((m) => `${m}/${cgroupParentOf(h)}`);
}

/** The directories of a job's cgroup (one per v1 mount). */
export function cgroupDirs(h: Exclude<CgroupHierarchy, { version: null }>, name: string): string[] {
  return cgroupParents(h).map((parent) => `${parent}/${name}`);
}

export function cgroupPlan(h: Exclude<CgroupHierarchy, { version: null }>, name: string, limits: JobLimits): CgroupPlan {
  const cpuQuota = limits.cpus === null ? null : Math.max(1000, Math.round(limits.cpus * CPU_PERIOD_US));
  const leaves = cgroupDirs(h, name);
  if (h.version === 2) {
    const parent = `${h.root}/${cgroupParentOf(h)}`;
    const leaf = `${parent}/${name}`;
    const enable = CONTROLLERS.map((c) => `+${c}`).join(' ');
    return {
      // A delegated subtree is there already, its parents root's: only its own subtree_control is the user's to write.
      dirs: h.delegated === undefined ? [parent, leaf] : [leaf],
      writes: [
        ...(h.delegated === undefined ? [{ file: `${h.root}/cgroup.subtree_control`, value: enable }] : []),
        { file: `${parent}/cgroup.subtree_control`, value: enable },
        { file: `${leaf}/memory.max`, value: limits.memory_bytes === null ? 'max' : String(limits.memory_bytes) },
        // memory.max bounds memory alone in v2: no swap on top of it.
        { file: `${leaf}/memory.swap.max`, value: limits.memory_bytes === null ? 'max' : '0', optional: true },
        { file: `${leaf}/cpu.max`, value: `${cpuQuota ?? 'max'} ${CPU_PERIOD_US}` },
        { file: `${leaf}/pids.max`, value: String(limits.pids) },
      ],
      procs: [`${leaf}/cgroup.procs`],
      oomFile: `${leaf}/memory.events`,
      cpuFile: { path: `${leaf}/cpu.stat`, unit: 'usage_usec' },
      memory: { usage: `${leaf}/memory.current`, stat: `${leaf}/memory.stat`, inactiveFile: 'inactive_file' },
    };
  }
  const at = (mount: string) => `${mount}/${cgroupParentOf(h)}/${name}`;
  const memory = limits.memory_bytes === null ? '-1' : String(limits.memory_bytes);
  return {
    dirs: h.delegated === undefined ? leaves.flatMap((leaf) => [leaf.slice(0, leaf.lastIndexOf('/')), leaf]) : leaves,
    writes: [
      // memory first: memory + swap (memsw) may never be set below it.
      { file: `${at(h.memory)}/memory.limit_in_bytes`, value: memory },
      { file: `${at(h.memory)}/memory.memsw.limit_in_bytes`, value: memory, optional: true },
      { file: `${at(h.cpu)}/cpu.cfs_period_us`, value: String(CPU_PERIOD_US) },
      { file: `${at(h.cpu)}/cpu.cfs_quota_us`, value: String(cpuQuota ?? -1) },
      { file: `${at(h.pids)}/pids.max`, value: String(limits.pids) },
    ],
    procs: leaves.map((leaf) => `${leaf}/cgroup.procs`),
    oomFile: `${at(h.memory)}/memory.oom_control`,
    cpuFile: h.cpuacct ? { path: `${at(h.cpuacct)}/cpuacct.usage`, unit: 'ns' } : null,
    memory: { usage: `${at(h.memory)}/memory.usage_in_bytes`, stat: `${at(h.memory)}/memory.stat`, inactiveFile: 'total_inactive_file' },
  };
}

/** `oom_kill N` of memory.events (v2) or memory.oom_control (v1); null when the kernel does not count them. */
export function parseOomKills(text: string): number | null {
  const match = /^oom_kill (\d+)$/m.exec(text);
  return match ? Number(match[1]) : null;
}

/** CPU seconds from cpu.stat's `usage_usec` (v2) or cpuacct.usage's nanoseconds (v1). */
export function parseCpuSeconds(text: string, unit: 'usage_usec' | 'ns'): number | null {
  if (unit === 'ns') return /^\d+$/.test(text.trim()) ? Number(text.trim()) / 1e9 : null;
  const match = /^usage_usec (\d+)$/m.exec(text);
  return match ? Number(match[1]) / 1e6 : null;
}

/**
 * The job's working set, as the kubelet and `docker stats` read a cgroup: its memory count less the
 * inactive file pages the kernel would drop before an OOM kill; null when unreadable.
 */
export function workingSetBytes(usage: string, stat: string, inactiveFile: string): number | null {
  const used = Number(usage.trim());
  if (!Number.isSafeInteger(used)) return null;
  const inactive = new RegExp(`^${inactiveFile} (\\d+)$`, 'm').exec(stat);
  return Math.max(0, used - (inactive ? Number(inactive[1]) : 0));
}

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

/** The reason a job the kernel killed for its memory ended: `out of memory: limit 1 GiB`. */
export function outOfMemoryReason(limitBytes: number | null): string {
  if (limitBytes === null) return 'out of memory';
  const size = limitBytes >= GiB ? `${Number((limitBytes / GiB).toFixed(2))} GiB` : `${Number((limitBytes / MiB).toFixed(1))} MiB`;
  return `out of memory: limit ${size}`;
}

/** The line a job's log starts with when it runs without limits. */
export function noLimitsLine(why: string): string {
  return `troupe: resource limits (memory, cpu, pids) are not applied to this job: ${why}\n`;
}

/**
 * A process that moves itself into each cgroup named by `$1` files after it, then becomes the
 * command after them (exec: the same pid), so the command and all it starts are born in the job's
 * cgroup. It must come before `ip netns exec`, which mounts a /sys of its own without the cgroup mounts.
 */
const JOIN_CGROUP = [
  'n=$1; shift',
  'for f in "${@:1:n}"; do printf \'%s\\n\' "$$" > "$f" || { echo "troupe: cannot enter the job\'s cgroup ($f)" >&2; exit 1; }; done',
  'shift "$n"',
  'exec "$@"',
].join('\n');

/** `argv` run inside the job's cgroup (`procs`: its cgroup.procs files; none: `argv` as it is). */
export function inJobCgroup(procs: readonly string[], argv: readonly string[]): string[] {
  return procs.length > 0 ? [BASH, '--noprofile', '--norc', '-c', JOIN_CGROUP, 'troupe-cgroup', String(procs.length), ...procs, ...argv] : [...argv];
}
