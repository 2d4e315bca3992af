import { existsSync, mkdirSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import type { Instance } from '../../src/backends/backend';
import type { LocalBackend } from '../../src/backends/local/local-backend';
import { CGROUP_PARENT, cgroupDirs, DEFAULT_PIDS_MAX, jobLimits, noLimitsLine, type CgroupHierarchy } from '../../src/backends/cgroup-limits';
import { cgroupHierarchy, jobCpuSeconds } from '../../src/backends/local/job-cgroup';
import { fleetWallPrefix, jobCgroupName } from '../../src/backends/local/local-names';
import { jobRef, LocalFleetHarness, makeRun, resources, waitFor, type TestRun } from './local-fixtures';

/**
 * Issue 37, part 1 on the local fleet: a job's processes live in a cgroup of its own whose memory,
 * CPU and pids limits come from its group's `resources` (cgroup v1 or v2, whichever this machine
 * has); an OOM kill ends the job with a reason that names the limit; nothing of it is left after
 * its run is released, nor after a worker that died before removing it.
 */

const h = new LocalFleetHarness();
const hierarchy = await cgroupHierarchy();
const usable = hierarchy.version === null ? null : hierarchy;

afterAll(async () => {
  await h.cleanup();
});

let backendOnce: LocalBackend | null = null;
function backend(): LocalBackend {
  backendOnce ??= h.backend({ network: 'loopback', subnet: '127.213.244.0/24', releaseGraceSeconds: 1 });
  return backendOnce;
}

/** A one-node run whose group asks for `memory` GB and `cpu` CPUs (exact: min = max). */
function limitedRun(commands: string[], memoryGb: number | null, cpus: number | null): TestRun {
  const run = makeRun([{ name: 'a', nodes: 1, commands }]);
  const base = resources();
  run.groups[0]!.resources = {
    ...base,
    memory: memoryGb === null ? base.memory : { min: memoryGb, max: memoryGb },
    cpu: { arch: null, count: cpus === null ? base.cpu.count : { min: cpus, max: cpus } },
  };
  return run;
}

async function startOne(run: TestRun): Promise<{ instance: Instance; name: string }> {
  const instances = await h.provision(backend(), run);
  await h.start(backend(), run, instances);
  const instance = instances[0]!;
  return { instance, name: jobCgroupName(h.stateDir, instance.instance_id) };
}

async function ended(run: TestRun, instance: Instance) {
  return await waitFor('the job to end', async () => {
    const state = await backend().jobState(jobRef(run, 0, instance));
    return state.state === 'exited' && state;
  });
}

function cgroupLeft(name: string): string[] {
  return usable ? cgroupDirs(usable, name).filter((d) => existsSync(d)) : [];
}

describe.skipIf(!usable)(`a local job's limits (cgroup v${usable?.version ?? '-'})`, () => {
  it('ends a job that touches 512 MiB under a 256MB limit with an out-of-memory reason, and removes its cgroup', async () => {
    const run = limitedRun(['perl -e \'$x = "x" x (512 * 1024 * 1024); sleep 1\'', 'echo survived'], 0.25, null);
    const { instance, name } = await startOne(run);
    expect(cgroupLeft(name).length).toBeGreaterThan(0);
    const state = await ended(run, instance);
    expect(state).toMatchObject({ state: 'exited', exit_code: 137, reason: 'out of memory: limit 256 MiB' });
    const { data } = await backend().readLog(jobRef(run, 0, instance), 0, 10_000);
    expect(data).not.toContain('survived');
    await backend().releaseRun(run.runId, run.submission);
    expect(cgroupLeft(name)).toEqual([]);
    // Repeated (a retried teardown): nothing to do, no error.
    await backend().releaseRun(run.runId, run.submission);
  });

  it('holds two busy loops to one CPU of CPU time under cpu: 1, and the job reads the default pids.max', async () => {
    const busyS = 3;
    // What the job reads of its own cgroup: `show CONTROLLER V1_FILE V2_FILE` prints `V1_FILE=…` (v1) or `V2_FILE=…` (v2).
    const show = [
      'show() {',
      '  p=$(awk -F: -v c="$1" \'{ n = split($2, cs, ","); for (i = 1; i <= n; i++) if (cs[i] == c) print $3 }\' /proc/self/cgroup)',
      '  if [ -n "$p" ]; then echo "$2=$(cat "/sys/fs/cgroup/$1$p/$2")"; else echo "$3=$(cat "/sys/fs/cgroup$(sed -n \'s/^0:://p\' /proc/self/cgroup)/$3")"; fi',
      '}',
      'show pids pids.max pids.max',
      'show cpu cpu.cfs_quota_us cpu.max',
    ].join('\n');
    const busy = `timeout ${busyS} sh -c 'while :; do :; done'`;
    const run = limitedRun([show, `${busy} & ${busy} & wait`], null, 1);
    const { instance, name } = await startOne(run);
    // What `troupe metrics` reads of it: its cgroup's counts, and its limit (dstack's default memory: 8GB..).
    const usage = await waitFor('a reading of the busy job', async () => {
      const u = await backend().usage(jobRef(run, 0, instance));
      return u && u.cpu_seconds > 0.2 && u;
    });
    expect(usage).toMatchObject({ source: 'cgroup', memory_limit_bytes: 8 * 1024 ** 3 });
    // A probe (a ready command, a peers hook) is the task's code: it runs in the job's cgroup too.
    const probe = await backend().exec(jobRef(run, 0, instance), "sed -n 's/^[0-9]*:pids://p; s/^0:://p' /proc/self/cgroup | grep troupe", 5_000);
    expect(probe).toEqual({ exit_code: 0, output: `/${CGROUP_PARENT}/${name}` });
    const state = await ended(run, instance);
    // `wait` with no operand: 0 whatever the loops' (timeout's 124).
    expect(state).toMatchObject({ state: 'exited', exit_code: 0 });
    const cpu = await jobCpuSeconds(usable!, name, jobLimits(run.groups[0]!.resources, DEFAULT_PIDS_MAX));
    const { data } = await backend().readLog(jobRef(run, 0, instance), 0, 10_000);
    expect(data).toContain(`pids.max=${DEFAULT_PIDS_MAX}\n`);
    expect(data).toContain(usable!.version === 1 ? 'cpu.cfs_quota_us=100000\n' : 'cpu.max=100000 100000\n');
    if (cpu !== null) {
      // Two loops for 3 s are 6 CPU-seconds unlimited; the quota lets them have one CPU: ~3 s (+10%).
      console.log(`cpu: 1, two busy loops for ${busyS} s: ${cpu.toFixed(2)} CPU-seconds`);
      expect(cpu).toBeLessThanOrEqual(busyS * 1.1);
      expect(cpu).toBeGreaterThan(0.5);
    }
    await backend().releaseRun(run.runId, run.submission);
    expect(cgroupLeft(name)).toEqual([]);
  });

  it('stops a fork loop at the pids limit (TROUPE_LOCAL_PIDS_MAX, here 24); its release ends the processes it made', async () => {
    const small = h.backend({ network: 'loopback', subnet: '127.213.242.0/24', releaseGraceSeconds: 1, pidsMax: 24 });
    // perl's fork fails at once when refused (bash's retries for seconds).
    const forks = 'perl -e \'my $n = 0; for (1 .. 100) { my $p = fork; if (!defined $p) { print "fork refused after $n: $!\\n"; last } if (!$p) { sleep 1; exit 0 } $n++ } 1 while wait != -1\'';
    const run = limitedRun([forks], null, null);
    const instances = await h.provision(small, run);
    await h.start(small, run, instances);
    const ref = jobRef(run, 0, instances[0]!);
    const log = await waitFor('the fork loop to be refused', async () => /fork refused after (\d+)/.exec((await small.readLog(ref, 0, 10_000)).data));
    expect(Number(log[1])).toBeLessThan(24);
    expect(log.input).toContain('Resource temporarily unavailable');
    await small.releaseRun(run.runId, run.submission);
    expect(cgroupLeft(jobCgroupName(h.stateDir, instances[0]!.instance_id))).toEqual([]);
  });

  it('removes at the reaper\'s pass a cgroup of the fleet whose instance is gone (a worker killed mid-teardown)', async () => {
    const name = `${fleetWallPrefix(h.stateDir)}local-0000000000000000`;
    for (const dir of cgroupDirs(usable!, name)) mkdirSync(dir, { recursive: true });
    expect(cgroupLeft(name).length).toBeGreaterThan(0);
    await backend().heldRuns();
    expect(cgroupLeft(name)).toEqual([]);
  });
});

describe('a local job where the machine has no usable cgroup hierarchy', () => {
  /** Runs `echo ran` (asking for 256MB and 1 CPU) on a fleet that takes `cgroups` as its hierarchy; its exit code and log. */
  async function runWithout(cgroups: CgroupHierarchy, subnet: string): Promise<{ code: number | null; log: string }> {
    const fleet = h.backend({ network: 'loopback', subnet, releaseGraceSeconds: 1, cgroups });
    const run = limitedRun(['echo ran'], 0.25, 1);
    const instances = await h.provision(fleet, run);
    await h.start(fleet, run, instances);
    const ref = jobRef(run, 0, instances[0]!);
    const state = await waitFor('the job to end', async () => {
      const s = await fleet.jobState(ref);
      return s.state === 'exited' && s;
    });
    const { data } = await fleet.readLog(ref, 0, 10_000);
    await fleet.releaseRun(run.runId, run.submission);
    return { code: state.exit_code, log: data };
  }

  it('still runs, and the first line of its log says that no limits are applied and why', async () => {
    const why = 'no cgroup hierarchy has the memory, cpu and pids controllers (cgroup v1 lacks pids)';
    expect(await runWithout({ version: null, why }, '127.213.243.0/24')).toEqual({ code: 0, log: `${noLimitsLine(why)}ran\n` });
  });

  it('still runs when the kernel refuses its cgroup, and its log says so', async () => {
    const refused = await runWithout({ version: 1, memory: '/dev/null', cpu: '/dev/null', pids: '/dev/null', cpuacct: null }, '127.213.241.0/24');
    expect(refused).toEqual({ code: 0, log: `${noLimitsLine("ENOTDIR: not a directory, mkdir '/dev/null/troupe'")}ran\n` });
  });
});
