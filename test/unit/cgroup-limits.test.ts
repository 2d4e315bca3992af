import { describe, expect, it } from 'vitest';
import {
  cgroupPlan,
  DEFAULT_PIDS_MAX,
  detectCgroups,
  jobLimits,
  outOfMemoryReason,
  parseCpuSeconds,
  parseOomKills,
  pidsMaxFrom,
  workingSetBytes,
} from '../../src/backends/cgroup-limits';
import { defaultResources } from '../../src/config/resources';

/** /proc/self/mounts of this kind of machine: v1 controllers, an empty cgroup2 at unified/. */
const V1_MOUNTS = `tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
`;
/** A systemd machine of today: one cgroup2 tree. */
const V2_MOUNTS = `proc /proc proc rw 0 0
cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0
`;
/** Debian's older layout: cpu and cpuacct mounted together. */
const COMOUNTED = `cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,nosuid,nodev,noexec,relatime,pids 0 0
`;

const controllers = (map: Record<string, string>) => (mountPoint: string) => map[mountPoint] ?? null;

describe('which cgroup hierarchy holds a local job\'s limits', () => {
  it('takes cgroup v2 when memory, cpu and pids are among its controllers', () => {
    expect(detectCgroups(V2_MOUNTS, controllers({ '/sys/fs/cgroup': 'cpuset cpu io memory hugetlb pids rdma misc\n' }), true)).toEqual({ version: 2, root: '/sys/fs/cgroup' });
  });

  it('takes the v1 mounts when the v2 tree lacks the controllers (this machine)', () => {
    expect(detectCgroups(V1_MOUNTS, controllers({ '/sys/fs/cgroup/unified': 'hugetlb\n' }), true)).toEqual({
      version: 1,
      memory: '/sys/fs/cgroup/memory',
      cpu: '/sys/fs/cgroup/cpu',
      pids: '/sys/fs/cgroup/pids',
      cpuacct: '/sys/fs/cgroup/cpuacct',
    });
  });

  it('reads co-mounted v1 controllers as one directory', () => {
    const h = detectCgroups(COMOUNTED, controllers({}), true);
    expect(h).toMatchObject({ version: 1, cpu: '/sys/fs/cgroup/cpu,cpuacct', cpuacct: '/sys/fs/cgroup/cpu,cpuacct' });
    if (h.version !== 1) throw new Error('v1 expected');
    expect(cgroupPlan(h, 'j', jobLimits(defaultResources(), 10)).procs).toEqual([
      '/sys/fs/cgroup/memory/troupe/j/cgroup.procs',
      '/sys/fs/cgroup/cpu,cpuacct/troupe/j/cgroup.procs',
      '/sys/fs/cgroup/pids/troupe/j/cgroup.procs',
    ]);
  });

  it('says why there is none: no pids controller, or not root', () => {
    const noPids = COMOUNTED.split('\n').filter((l) => !l.includes('pids')).join('\n');
    expect(detectCgroups(noPids, controllers({}), true)).toEqual({ version: null, why: 'no cgroup hierarchy has the memory, cpu and pids controllers (cgroup v1 lacks pids)' });
    expect(detectCgroups(V2_MOUNTS, controllers({ '/sys/fs/cgroup': 'cpu memory pids' }), false)).toEqual({ version: null, why: 'the worker is not root' });
  });
});

describe('a local job\'s limits from its group\'s resources', () => {
  const gib = 1024 ** 3;
  const with_ = (memory: { min: number | null; max: number | null }, cpu: { min: number | null; max: number | null }) => ({
    ...defaultResources(),
    memory,
    cpu: { arch: null, count: cpu },
  });

  it('takes a range\'s upper bound, else its lower bound (request = limit)', () => {
    expect(jobLimits(with_({ min: 1, max: 4 }, { min: 2, max: 8 }), 100)).toEqual({ memory_bytes: 4 * gib, cpus: 8, pids: 100 });
    expect(jobLimits(with_({ min: 0.25, max: 0.25 }, { min: 1, max: 1 }), 100)).toEqual({ memory_bytes: 256 * 1024 ** 2, cpus: 1, pids: 100 });
    // dstack's defaults, memory 8GB.. and cpu 2..: lower bounds only.
    expect(jobLimits(defaultResources(), DEFAULT_PIDS_MAX)).toEqual({ memory_bytes: 8 * gib, cpus: 2, pids: 4096 });
    expect(jobLimits(with_({ min: null, max: null }, { min: 0, max: null }), 1)).toEqual({ memory_bytes: null, cpus: null, pids: 1 });
  });

  it('writes v1 memory before memory + swap, a CPU quota per 100 ms period, and the pids limit', () => {
    const h = detectCgroups(V1_MOUNTS, controllers({}), true);
    if (h.version !== 1) throw new Error('v1 expected');
    const plan = cgroupPlan(h, 'f_local-1', { memory_bytes: gib, cpus: 1.5, pids: 64 });
    expect(plan.writes.map((w) => [w.file.replace('/sys/fs/cgroup/', ''), w.value])).toEqual([
      ['memory/troupe/f_local-1/memory.limit_in_bytes', String(gib)],
      ['memory/troupe/f_local-1/memory.memsw.limit_in_bytes', String(gib)],
      ['cpu/troupe/f_local-1/cpu.cfs_period_us', '100000'],
      ['cpu/troupe/f_local-1/cpu.cfs_quota_us', '150000'],
      ['pids/troupe/f_local-1/pids.max', '64'],
    ]);
    expect(plan.dirs[0]).toBe('/sys/fs/cgroup/memory/troupe');
    expect(plan.oomFile).toBe('/sys/fs/cgroup/memory/troupe/f_local-1/memory.oom_control');
    expect(plan.cpuFile).toEqual({ path: '/sys/fs/cgroup/cpuacct/troupe/f_local-1/cpuacct.usage', unit: 'ns' });
  });

  it('writes v2 limits in the job\'s leaf, the controllers enabled above it, no swap', () => {
    const plan = cgroupPlan({ version: 2, root: '/sys/fs/cgroup' }, 'j', { memory_bytes: gib, cpus: null, pids: 64 });
    expect(plan.writes.map((w) => [w.file, w.value])).toEqual([
      ['/sys/fs/cgroup/cgroup.subtree_control', '+memory +cpu +pids'],
      ['/sys/fs/cgroup/troupe/cgroup.subtree_control', '+memory +cpu +pids'],
      ['/sys/fs/cgroup/troupe/j/memory.max', String(gib)],
      ['/sys/fs/cgroup/troupe/j/memory.swap.max', '0'],
      ['/sys/fs/cgroup/troupe/j/cpu.max', 'max 100000'],
      ['/sys/fs/cgroup/troupe/j/pids.max', '64'],
    ]);
    expect(plan.procs).toEqual(['/sys/fs/cgroup/troupe/j/cgroup.procs']);
  });

  it('takes the pids limit from TROUPE_LOCAL_PIDS_MAX, and refuses a bad one', () => {
    expect(pidsMaxFrom({})).toBe(DEFAULT_PIDS_MAX);
    expect(pidsMaxFrom({ TROUPE_LOCAL_PIDS_MAX: '512' })).toBe(512);
    expect(() => pidsMaxFrom({ TROUPE_LOCAL_PIDS_MAX: '0' })).toThrow('TROUPE_LOCAL_PIDS_MAX must be a whole number ≥ 1, not "0"');
    // SSH hosts' jobs take theirs from a variable of their own, checked the same way.
    expect(pidsMaxFrom({ TROUPE_LOCAL_PIDS_MAX: '512' }, 'TROUPE_SSH_PIDS_MAX')).toBe(DEFAULT_PIDS_MAX);
    expect(pidsMaxFrom({ TROUPE_SSH_PIDS_MAX: '256' }, 'TROUPE_SSH_PIDS_MAX')).toBe(256);
    expect(() => pidsMaxFrom({ TROUPE_SSH_PIDS_MAX: '1.5' }, 'TROUPE_SSH_PIDS_MAX')).toThrow('ssh fleets: TROUPE_SSH_PIDS_MAX must be a whole number ≥ 1, not "1.5"');
  });
});

describe('what a job\'s cgroup counted', () => {
  it('reads OOM kills from v2 memory.events and v1 memory.oom_control', () => {
    expect(parseOomKills('low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n')).toBe(1);
    expect(parseOomKills('oom_kill_disable 0\nunder_oom 0\noom_kill 3\n')).toBe(3);
    expect(parseOomKills('oom_kill_disable 0\nunder_oom 0\n')).toBeNull();
  });

  it('reads CPU time from cpu.stat and cpuacct.usage', () => {
    expect(parseCpuSeconds('usage_usec 2500000\nuser_usec 2000000\n', 'usage_usec')).toBe(2.5);
    expect(parseCpuSeconds('1500000000\n', 'ns')).toBe(1.5);
  });

  it('reads the working set: the memory count less inactive file pages (v2 inactive_file, v1 total_inactive_file)', () => {
    expect(workingSetBytes('1000\n', 'active_file 300\ninactive_file 200\n', 'inactive_file')).toBe(800);
    expect(workingSetBytes('1000\n', 'inactive_file 5\ntotal_inactive_file 400\n', 'total_inactive_file')).toBe(600);
    expect(workingSetBytes('1000\n', '', 'inactive_file')).toBe(1000);
    expect(workingSetBytes('max\n', '', 'inactive_file')).toBeNull();
  });

  it('names the limit in the out-of-memory reason', () => {
    expect(outOfMemoryReason(1024 ** 3)).toBe('out of memory: limit 1 GiB');
    expect(outOfMemoryReason(256 * 1024 ** 2)).toBe('out of memory: limit 256 MiB');
    expect(outOfMemoryReason(1.5 * 1024 ** 3)).toBe('out of memory: limit 1.5 GiB');
  });
});
