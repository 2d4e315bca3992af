import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_PIDS_MAX, jobLimits } from '../../src/backends/cgroup-limits';
import { cgroupStartLines, limitsOfDetails, parseCgroupProbe, sshCgroupName, sshJobCgroup, sshRunCgroupPrefix } from '../../src/backends/ssh/job-cgroup-script';
import { defaultResources } from '../../src/config/resources';

const HOST = 'root@10.0.0.2:22';
const V1 = [
  'result cgroups 0',
  'mount cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu',
  'mount cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct',
  'mount cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory',
  'mount cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids',
  'mount cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime',
  'controllers /sys/fs/cgroup/unified ',
].join('\n');
const V2 = ['result cgroups 0', 'mount cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev', 'controllers /sys/fs/cgroup cpuset cpu io memory pids'].join('\n');

describe("an SSH host's hierarchy for job limits (the probe's answer)", () => {
  it('takes v1 or v2 as the local fleet does, when the SSH user is root', () => {
    expect(parseCgroupProbe(V1, HOST)).toEqual({ version: 1, memory: '/sys/fs/cgroup/memory', cpu: '/sys/fs/cgroup/cpu', pids: '/sys/fs/cgroup/pids', cpuacct: '/sys/fs/cgroup/cpuacct' });
    expect(parseCgroupProbe(V2, HOST)).toEqual({ version: 2, root: '/sys/fs/cgroup' });
  });

  it('has none, and says why naming the host, for a user who is not root, a host without the controllers, or no answer', () => {
    // Without the probe's lines about a delegated subtree (test/unit/ssh-cgroup-delegation.test.ts).
    expect(parseCgroupProbe(V2.replace('cgroups 0', 'cgroups 1000'), HOST)).toEqual({ version: null, why: `the SSH user of ${HOST} is not root (uid 1000) and ${HOST} did not say where its delegated cgroup subtree is` });
    expect(parseCgroupProbe('result cgroups 0\n', HOST)).toMatchObject({ version: null, why: expect.stringMatching(new RegExp(`^${HOST}: no cgroup hierarchy has the memory, cpu and pids controllers`)) });
    expect(parseCgroupProbe('', HOST)).toEqual({ version: null, why: `${HOST} did not say which cgroups it has` });
  });
});

describe("an SSH job's cgroup", () => {
  it('is named from its directory, under a prefix of its run directory; nothing of the job in it', () => {
    const name = sshCgroupName('/root/.troupe/jobs/run-1', '/root/.troupe/jobs/run-1/0/job;rm -rf');
    expect(name.startsWith(sshRunCgroupPrefix('/root/.troupe/jobs/run-1'))).toBe(true);
    expect(name).toMatch(/^ssh-[0-9a-f]{10}-[0-9a-f]{16}$/);
    expect(sshCgroupName('/b/run-1', '/b/run-1/0/job')).not.toBe(sshCgroupName('/b/run-1', '/b/run-1/0/job.attempt-1'));
  });

  it("takes the limits the instance carries; an instance from before limits has the pids limit alone", () => {
    const limits = jobLimits({ ...defaultResources(), memory: { min: 0.25, max: null } }, 100);
    expect(limitsOfDetails({ limits: JSON.stringify(limits) })).toEqual(limits);
    expect(limitsOfDetails({})).toEqual({ memory_bytes: null, cpus: null, pids: DEFAULT_PIDS_MAX });
  });
});

describe("the start script's cgroup lines, run by bash on a stand-in v2 tree", () => {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-ssh-cgroup-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const limits = { memory_bytes: 256 * 1024 ** 2, cpus: 1, pids: 64 };

  function run(lines: string[]): { log: string; join: string } {
    writeFileSync(join(dir, 'log'), '');
    const out = spawnSync('bash', ['--noprofile', '--norc', '-c', `cd "$1" || exit 1\n${lines.join('\n')}\nprintf '%s\\n' "\${cg_join[@]}"`, 'test', dir], { encoding: 'utf8' });
    expect(out.status, out.stderr).toBe(0);
    return { log: readFileSync(join(dir, 'log'), 'utf8'), join: out.stdout };
  }

  it('makes the cgroup, writes each limit, and joins it by its cgroup.procs; the log says nothing', () => {
    const root = join(dir, 'ok');
    mkdirSync(root);
    const cgroup = sshJobCgroup({ version: 2, root }, 'ssh-a-b', limits);
    const { log, join: words } = run(cgroupStartLines(cgroup, 'log'));
    expect(log).toBe('');
    const leaf = join(root, 'troupe', 'ssh-a-b');
    expect(['memory.max', 'cpu.max', 'pids.max', 'memory.swap.max'].map((f) => readFileSync(join(leaf, f), 'utf8'))).toEqual([String(256 * 1024 ** 2), '100000 100000', '64', '0']);
    expect(words.split('\n')).toContain(join(leaf, 'cgroup.procs'));
  });

  it('where a limit cannot be written, removes what it made, starts without it and writes one line saying why', () => {
    const root = join(dir, 'refused');
    mkdirSync(join(root, 'troupe', 'ssh-a-c', 'cpu.max'), { recursive: true });
    const { log, join: words } = run(cgroupStartLines(sshJobCgroup({ version: 2, root }, 'ssh-a-c', limits), 'log'));
    expect(log).toBe(`troupe: resource limits (memory, cpu, pids) are not applied to this job: cannot set ${join(root, 'troupe', 'ssh-a-c', 'cpu.max')} to 100000 100000 on this host\n`);
    expect(words.trim()).toBe('');
  });

  it('without a hierarchy: the one line with the reason, nothing to join', () => {
    const { log, join: words } = run(cgroupStartLines({ kind: 'none', why: `the SSH user of ${HOST} is not root` }, 'log'));
    expect(log).toBe(`troupe: resource limits (memory, cpu, pids) are not applied to this job: the SSH user of ${HOST} is not root\n`);
    expect(words.trim()).toBe('');
  });
});
