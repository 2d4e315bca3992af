import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cgroupPlan } from '../../src/backends/cgroup-limits';
import {
  cgroupParentFrom,
  cgroupProbeScript,
  cgroupStartLines,
  defaultDelegatedParent,
  parseCgroupProbe,
  sshCgroupParents,
  sshJobCgroup,
} from '../../src/backends/ssh/job-cgroup-script';
import { cleanupJobScript, jobStateScript } from '../../src/backends/ssh/job-scripts';

/** Issue 37 part 1 for SSH users who are not root: the subtree an admin delegated, found by the probe (its answer parsed here). */

const HOST = 'bob@10.0.0.2:22';
const V1_CONTROLLERS = ['cpu', 'cpuacct', 'memory', 'pids'];
/** A v1 host as this machine is (a mount per controller, an empty v2 tree beside them), probed as user bob. */
const V1_MOUNTS = [
  'result cgroups 1001',
  ...V1_CONTROLLERS.map((c) => `mount cgroup /sys/fs/cgroup/${c} cgroup rw,relatime,${c}`),
  'mount cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime',
  'controllers /sys/fs/cgroup/unified ',
  'user bob',
];
const v1 = (states: Record<string, string>, parent = 'troupe-bob') =>
  [...V1_MOUNTS, ...V1_CONTROLLERS.map((c) => `delegated /sys/fs/cgroup/${c} ${states[c] ?? 'writable'} ${parent}`), `delegated /sys/fs/cgroup/unified missing ${parent}`].join('\n');
const V2_PARENT = 'user.slice/user-1001.slice/user@1001.service/troupe';
const v2 = (subtree: string, containment: string) =>
  [
    'result cgroups 1001',
    'mount cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev',
    'controllers /sys/fs/cgroup cpuset cpu io memory pids',
    'user bob',
    `delegated /sys/fs/cgroup writable ${V2_PARENT}`,
    `subtree /sys/fs/cgroup ${subtree}`,
    `containment /sys/fs/cgroup ${containment}`,
  ].join('\n');
const NOT_ROOT = `the SSH user of ${HOST} is not root (uid 1001)`;

describe('the subtree delegated to an SSH user who is not root (the probe\'s answer)', () => {
  it('cgroup v1: writable in the memory, cpu and pids hierarchies, it holds the jobs\' cgroups (cpuacct where it is there too)', () => {
    const h = { version: 1, memory: '/sys/fs/cgroup/memory', cpu: '/sys/fs/cgroup/cpu', pids: '/sys/fs/cgroup/pids' };
    expect(parseCgroupProbe(v1({}), HOST)).toEqual({ ...h, cpuacct: '/sys/fs/cgroup/cpuacct', delegated: 'troupe-bob' });
    expect(parseCgroupProbe(v1({ cpuacct: 'missing' }), HOST)).toEqual({ ...h, cpuacct: null, delegated: 'troupe-bob' });
  });

  it('cgroup v1: missing or not writable in one hierarchy, none, and the line says where and how an admin delegates it', () => {
    const missing = parseCgroupProbe(v1({ memory: 'missing' }), HOST);
    expect(missing).toEqual({
      version: null,
      why: `${NOT_ROOT} and has no cgroup subtree delegated to it: /sys/fs/cgroup/memory/troupe-bob is missing; to delegate one, as root, for c in memory cpu pids (and cpuacct): mkdir /sys/fs/cgroup/$c/troupe-bob && chown bob /sys/fs/cgroup/$c/troupe-bob{,/cgroup.procs,/tasks} (README: Security)`,
    });
    expect(parseCgroupProbe(v1({ pids: 'not-writable' }), HOST)).toMatchObject({ version: null, why: expect.stringContaining('/sys/fs/cgroup/pids/troupe-bob is not writable by it;') });
  });

  it('cgroup v2: writable, memory, cpu and pids enabled above it, and the login may move its processes in', () => {
    expect(parseCgroupProbe(v2('cpuset cpu io memory pids', 'ok /user.slice/user-1001.slice'), HOST)).toEqual({ version: 2, root: '/sys/fs/cgroup', delegated: V2_PARENT });
    expect(parseCgroupProbe(v2('cpu memory', 'ok /'), HOST)).toMatchObject({ version: null, why: expect.stringContaining(`its delegated cgroup /sys/fs/cgroup/${V2_PARENT} cannot enable pids`) });
    expect(parseCgroupProbe(v2('cpu memory pids', 'no /user.slice/user-1001.slice'), HOST)).toMatchObject({
      version: null,
      why: expect.stringContaining('its SSH login\'s cgroup and the subtree meet at /user.slice/user-1001.slice, whose cgroup.procs it may not write'),
    });
  });

  it('no delegation lines, or a path that is not a plain relative one: none, saying so', () => {
    const why = `${NOT_ROOT} and ${HOST} did not say where its delegated cgroup subtree is`;
    expect(parseCgroupProbe(V1_MOUNTS.join('\n'), HOST)).toEqual({ version: null, why });
    expect(parseCgroupProbe(v1({}, '../../etc'), HOST)).toEqual({ version: null, why });
  });

  it('the root case is as before: no delegated subtree', () => {
    expect(parseCgroupProbe(v1({}).replace('cgroups 1001', 'cgroups 0'), HOST)).not.toHaveProperty('delegated');
  });
});

describe('where the subtree is', () => {
  it('by default: troupe-USER in each v1 hierarchy, troupe in the user\'s systemd manager on v2', () => {
    expect(defaultDelegatedParent(1, 'bob', '1001')).toBe('troupe-bob');
    expect(defaultDelegatedParent(2, 'bob', '1001')).toBe(V2_PARENT);
  });

  it('TROUPE_SSH_CGROUP_PARENT names another, relative to each mount; anything else is refused', () => {
    expect(cgroupParentFrom({})).toBeNull();
    expect(cgroupParentFrom({ TROUPE_SSH_CGROUP_PARENT: '' })).toBeNull();
    expect(cgroupParentFrom({ TROUPE_SSH_CGROUP_PARENT: '/jobs/bob.troupe/' })).toBe('jobs/bob.troupe');
    for (const bad of ['../x', 'a/../b', 'a/./b', 'a b', 'a;rm', '$(id)', 'a//b']) {
      expect(() => cgroupParentFrom({ TROUPE_SSH_CGROUP_PARENT: bad }), bad).toThrow(/TROUPE_SSH_CGROUP_PARENT must be a path relative to each cgroup mount/);
    }
  });

  it('the probe quotes the one the worker names and makes the default from the host\'s own user', () => {
    expect(cgroupProbeScript(null)).toContain('cgroup) p=troupe-$u ;; cgroup2) p=user.slice/user-$i.slice/user@$i.service/troupe ;;');
    expect(cgroupProbeScript('jobs/bob')).toContain("cgroup) p='jobs/bob' ;; cgroup2) p='jobs/bob' ;;");
  });
});

describe("a job's cgroup under a delegated subtree", () => {
  const limits = { memory_bytes: 256 * 1024 ** 2, cpus: 1, pids: 64 };

  it('makes only the job\'s own directories and writes nothing outside the subtree (v1, v2)', () => {
    const p1 = cgroupPlan({ version: 1, memory: '/m', cpu: '/c', pids: '/p', cpuacct: null, delegated: 'troupe-bob' }, 'ssh-a-b', limits);
    expect(p1.dirs).toEqual(['/m/troupe-bob/ssh-a-b', '/c/troupe-bob/ssh-a-b', '/p/troupe-bob/ssh-a-b']);
    expect(p1.writes.every((w) => /^\/[mcp]\/troupe-bob\/ssh-a-b\//.test(w.file))).toBe(true);
    expect(p1.oomFile).toBe('/m/troupe-bob/ssh-a-b/memory.oom_control');
    const p2 = cgroupPlan({ version: 2, root: '/u', delegated: 'd/troupe' }, 'ssh-a-b', limits);
    expect(p2.dirs).toEqual(['/u/d/troupe/ssh-a-b']);
    expect(p2.writes.map((w) => w.file)).toEqual(['/u/d/troupe/cgroup.subtree_control', ...['memory.max', 'memory.swap.max', 'cpu.max', 'pids.max'].map((f) => `/u/d/troupe/ssh-a-b/${f}`)]);
  });

  it('the clean-up and state scripts look under both parents', () => {
    const parents = sshCgroupParents({ version: 1, memory: '/m', cpu: '/c', pids: '/p', cpuacct: null, delegated: 'troupe-bob' });
    expect(parents).toEqual(['troupe', 'troupe-bob']);
    expect(sshCgroupParents({ version: null, why: 'x' })).toEqual(['troupe']);
    expect(cleanupJobScript('/j', 'ssh-a-b', parents)).toContain("remove_cgroups 'ssh-a-b' 'troupe' 'troupe-bob' || exit 0");
    expect(jobStateScript('/j', 'ssh-a-b', parents)).toContain('"$mp"/\'troupe-bob/ssh-a-b\'/memory.oom_control');
  });

  describe('run by bash on a stand-in v2 tree', () => {
    const dir = mkdtempSync(join(tmpdir(), 'troupe-ssh-cgdeleg-'));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it('writes the limits and the subtree\'s own subtree_control, never the tree root\'s', () => {
      const parent = join(dir, 'd', 'troupe');
      mkdirSync(parent, { recursive: true });
      writeFileSync(join(dir, 'log'), '');
      const lines = cgroupStartLines(sshJobCgroup({ version: 2, root: dir, delegated: 'd/troupe' }, 'ssh-a-b', limits), 'log');
      const out = spawnSync('bash', ['--noprofile', '--norc', '-c', `cd "$1" || exit 1\n${lines.join('\n')}`, 'test', dir], { encoding: 'utf8' });
      expect(out.status, out.stderr).toBe(0);
      expect(readFileSync(join(dir, 'log'), 'utf8')).toBe('');
      expect(readFileSync(join(parent, 'cgroup.subtree_control'), 'utf8')).toBe('+memory +cpu +pids');
      expect(readFileSync(join(parent, 'ssh-a-b', 'pids.max'), 'utf8')).toBe('64');
      expect(existsSync(join(dir, 'cgroup.subtree_control'))).toBe(false);
    });
  });
});
