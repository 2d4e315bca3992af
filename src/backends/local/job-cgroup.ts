import { mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { cgroupDirs, cgroupParents, cgroupPlan, detectCgroups, parseCpuSeconds, parseOomKills, workingSetBytes, type CgroupHierarchy, type JobLimits } from '../cgroup-limits';
import { isErrno } from './state-files';

/**
 * A local job's cgroup on this machine (cgroup.ts decides where and what): made before its wrapper
 * starts (the wrapper moves itself in before anything else, so every process of the job is born
 * inside), read for its OOM kills and CPU time, removed at teardown after killing what is left.
 * Every step is idempotent: a teardown repeated, or one after a worker's crash, finds what is left.
 */

/** How long processes of a removed cgroup may outlive SIGKILL before the removal fails. */
const KILL_WAIT_MS = 10_000;

async function readText(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch {
    return null;
  }
}

let detected: Promise<CgroupHierarchy> | null = null;

/** This machine's hierarchy for job limits (looked at once per process). */
export function cgroupHierarchy(): Promise<CgroupHierarchy> {
  detected ??= (async () => {
    const mounts = (await readText('/proc/self/mounts')) ?? '';
    const controllers = new Map<string, string | null>();
    for (const line of mounts.split('\n')) {
      const [, mountPoint, type] = line.split(' ');
      if (type === 'cgroup2' && mountPoint) controllers.set(mountPoint, await readText(`${mountPoint}/cgroup.controllers`));
    }
    return detectCgroups(mounts, (m) => controllers.get(m) ?? null, process.getuid?.() === 0);
  })();
  return detected;
}

export type UsableHierarchy = Exclude<CgroupHierarchy, { version: null }>;

/** Makes the job's cgroup with its limits (again, if it exists); returns the files its processes join by. */
export async function createJobCgroup(h: UsableHierarchy, name: string, limits: JobLimits): Promise<string[]> {
  const plan = cgroupPlan(h, name, limits);
  for (const dir of plan.dirs) await mkdir(dir, { recursive: true });
  for (const { file, value, optional } of plan.writes) {
    try {
      await writeFile(file, value);
    } catch (err) {
      if (optional && isErrno(err, 'ENOENT')) continue;
      throw new Error(`local fleet: cannot set ${file} to ${value}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  return plan.procs;
}

/** OOM kills counted in the job's cgroup, or null when it is gone (or the kernel does not count them). */
export async function jobOomKills(h: UsableHierarchy, name: string, limits: JobLimits): Promise<number | null> {
  const text = await readText(cgroupPlan(h, name, limits).oomFile);
  return text === null ? null : parseOomKills(text);
}

/** CPU seconds the job's processes used, or null when its cgroup is gone (or v1 has no cpuacct). */
export async function jobCpuSeconds(h: UsableHierarchy, name: string, limits: JobLimits): Promise<number | null> {
  const file = cgroupPlan(h, name, limits).cpuFile;
  const text = file ? await readText(file.path) : null;
  return file && text !== null ? parseCpuSeconds(text, file.unit) : null;
}

/** What the job's cgroup counted so far: CPU seconds and the memory in use, or null when it is gone (or counts no CPU time). */
export async function jobCgroupUsage(h: UsableHierarchy, name: string, limits: JobLimits): Promise<{ cpu_seconds: number; memory_bytes: number } | null> {
  const { memory } = cgroupPlan(h, name, limits);
  const [cpu, usage, stat] = await Promise.all([jobCpuSeconds(h, name, limits), readText(memory.usage), readText(memory.stat)]);
  const bytes = usage === null ? null : workingSetBytes(usage, stat ?? '', memory.inactiveFile);
  return cpu === null || bytes === null ? null : { cpu_seconds: cpu, memory_bytes: bytes };
}

async function pidsIn(dir: string): Promise<number[]> {
  const text = await readText(`${dir}/cgroup.procs`);
  return text === null ? [] : text.split('\n').filter(Boolean).map(Number);
}

/**
 * Kills every process left in the job's cgroup, then removes it; nothing to do when it is gone.
 * An empty cgroup (a stopped job's) is removed at the first try, without reading it.
 */
export async function removeJobCgroup(h: UsableHierarchy, name: string): Promise<void> {
  let dirs = cgroupDirs(h, name);
  const deadline = Date.now() + KILL_WAIT_MS;
  for (let round = 0; ; round += 1) {
    const left: string[] = [];
    for (const dir of dirs) {
      if (round > 0) await killAllIn(h, dir);
      try {
        await rmdir(dir);
      } catch (err) {
        // Gone, or never made (a path that is no directory: a cgroup the kernel refused).
        if (isErrno(err, 'ENOENT') || isErrno(err, 'ENOTDIR')) continue;
        if (!isErrno(err, 'EBUSY')) throw err;
        left.push(dir);
      }
    }
    if (left.length === 0) return;
    if (Date.now() > deadline) throw new Error(`local fleet: processes ${(await Promise.all(left.map(pidsIn))).flat().join(', ')} of cgroup ${name} survive SIGKILL`);
    dirs = left;
    if (round > 0) await sleep(50);
  }
}

async function killAllIn(h: UsableHierarchy, dir: string): Promise<void> {
  // v2 kills the whole group at once where the kernel has cgroup.kill (5.14).
  if (h.version === 2) await writeFile(`${dir}/cgroup.kill`, '1').catch(() => undefined);
  for (const pid of await pidsIn(dir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch (err) {
      if (!isErrno(err, 'ESRCH')) throw err;
    }
  }
}

/** Names of the cgroups whose names start with `prefix` (a fleet's), in any of the hierarchy's mounts. */
export async function jobCgroupsNamed(h: UsableHierarchy, prefix: string): Promise<string[]> {
  const names = new Set<string>();
  for (const parent of cgroupParents(h)) {
    try {
      for (const entry of await readdir(parent, { withFileTypes: true })) if (entry.isDirectory() && entry.name.startsWith(prefix)) names.add(entry.name);
    } catch (err) {
      if (!isErrno(err, 'ENOENT')) throw err;
    }
  }
  return [...names];
}
