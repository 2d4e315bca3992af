import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CGROUP_PARENT } from '../../src/backends/cgroup-limits';
import { sshRunCgroupPrefix } from '../../src/backends/ssh/job-cgroup-script';
import { runDirectory } from '../../src/backends/ssh/job-paths';
import type { RunState } from '../../src/client';
import { RunReaper } from '../../src/worker/run-reaper';
import { logRefOf } from '../../src/client/job-attempts';
import { applyFleetYaml, expectAllClean, fleetYaml, startSshFleetEnv, waitForRun, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * Issue 37, part 1, on SSH hosts (real sshd hosts in network namespaces, SSH user root): a job runs
 * in a cgroup of its own with its group's `resources` as limits; one the kernel kills for its
 * memory ends FAILED with the limit named; the cgroup is gone once the run is.
 */

let env: SshFleetEnv;
let fleet: string | null = null;
let counter = 0;
const savedKnownHosts = process.env.TROUPE_KNOWN_HOSTS;
const isRoot = process.getuid?.() === 0;

beforeAll(async () => {
  if (!isRoot) return;
  env = await startSshFleetEnv([{ name: 'a' }]);
  process.env.TROUPE_KNOWN_HOSTS = env.hosts.knownHostsFile;
}, 120_000);

afterEach(async () => {
  if (!env) return;
  await expectAllClean(env, fleet);
  if (fleet) await env.fleets.delete(fleet, { force: true });
  fleet = null;
});

afterAll(async () => {
  if (savedKnownHosts === undefined) delete process.env.TROUPE_KNOWN_HOSTS;
  else process.env.TROUPE_KNOWN_HOSTS = savedKnownHosts;
  await env?.close();
});

/** Submits a one-node task to a fresh fleet of host `a`. */
async function submitOnFleet(prefix: string, lines: string[]) {
  counter += 1;
  const suffix = `${counter}-${env.taskQueue.slice(-6)}`;
  fleet = `${prefix}-${suffix}`;
  const name = `${prefix}-run-${suffix}`;
  await applyFleetYaml(env, fleetYaml(env, fleet, ['a']));
  const handle = await env.troupe.submit({ yaml: ['type: task', `name: ${name}`, ...lines, ''].join('\n'), fleets: [fleet], checkWorkers: false });
  return { name, handle };
}

async function runOnFleet(prefix: string, lines: string[]): Promise<{ state: RunState; log: string }> {
  const { name, handle } = await submitOnFleet(prefix, lines);
  const state = await handle.wait();
  const log = (await env.troupe.run(name).readLog(0)).data;
  return { state, log };
}

/** The run's cgroups left on the host (in any hierarchy's mount: the hosts share this machine's kernel). */
function cgroupsLeft(state: RunState): string[] {
  const prefix = sshRunCgroupPrefix(runDirectory(env.hosts.host('a').jobBaseDir, state.run_uid));
  const left: string[] = [];
  for (const mount of readdirSync('/sys/fs/cgroup').map((m) => join('/sys/fs/cgroup', m, CGROUP_PARENT)).concat(join('/sys/fs/cgroup', CGROUP_PARENT))) {
    if (!existsSync(mount)) continue;
    for (const entry of readdirSync(mount)) if (entry.startsWith(prefix)) left.push(join(mount, entry));
  }
  return left;
}

describe.skipIf(!isRoot)('limits from resources on an SSH host (SSH user root)', () => {
  // Ranges open above: an SSH host's memory and CPUs must lie in the range, and the hosts have more; the limit is then the lower bound.
  it("a job that holds 512 MiB under `memory: 256MB..` ends FAILED with 'out of memory: limit 256 MiB'; its cgroup is gone after the run", async () => {
    const { state, log } = await runOnFleet('oom', [
      'commands:',
      `  - perl -e '$x = "x" x (512 * 1024 * 1024); sleep 1'`,
      '  - echo survived',
      'resources: {memory: 256MB.., disk: 1GB..}',
    ]);
    expect(state.status, JSON.stringify(state, null, 2)).toBe('FAILED');
    expect(state.jobs[0]).toMatchObject({ status: 'FAILED', exit_code: 137, message: 'out of memory: limit 256 MiB (exit code 137)' });
    expect(log).not.toContain('survived');
    expect(log).not.toContain('not applied');
    expect(cgroupsLeft(state)).toEqual([]);
  });

  it("a job reads its own CPU quota, memory and pids limits from inside: `cpu: 1..`, `memory: 1GB..`, the default pids limit", async () => {
    // Each controller's file, found from the job's own /proc/self/cgroup (v1: a line per hierarchy; v2: `0::`).
    const read = [
      'while IFS=: read -r _ ctl path; do',
      '  case $ctl in',
      '    memory) echo "memory=$(cat /sys/fs/cgroup/memory$path/memory.limit_in_bytes)" "in=$path" ;;',
      '    pids) echo "pids=$(cat /sys/fs/cgroup/pids$path/pids.max)" ;;',
      '    cpu|cpu,cpuacct) echo "cpu=$(cat /sys/fs/cgroup/$ctl$path/cpu.cfs_quota_us)" ;;',
      '    "") [ -e /sys/fs/cgroup$path/cpu.max ] && echo "in=$path" "memory=$(cat /sys/fs/cgroup$path/memory.max)" "pids=$(cat /sys/fs/cgroup$path/pids.max)" "cpu=$(cut -d" " -f1 /sys/fs/cgroup$path/cpu.max)" ;;',
      '  esac',
      'done < /proc/self/cgroup | tr " " "\\n" | sort',
    ].join('\n');
    const { state, log } = await runOnFleet('limits', ['commands:', '  - |', ...read.split('\n').map((l) => `    ${l}`), 'resources: {cpu: 1.., memory: 1GB.., disk: 1GB..}']);
    expect(state.status, `${JSON.stringify(state, null, 2)}\n${log}`).toBe('DONE');
    const prefix = sshRunCgroupPrefix(runDirectory(env.hosts.host('a').jobBaseDir, state.run_uid));
    expect(log.split('\n').filter((l) => /^(cpu|memory|pids|in)=/.test(l)), log).toEqual([
      'cpu=100000',
      expect.stringMatching(new RegExp(`^in=/${CGROUP_PARENT}/${prefix}[0-9a-f]{16}$`)),
      'memory=1073741824',
      'pids=4096',
    ]);
    expect(cgroupsLeft(state)).toEqual([]);
  });

  it("a run terminated in Temporal: the reaper's release kills what runs in the job's cgroup and removes it", async () => {
    const { name, handle } = await submitOnFleet('reaped', ['commands: [\'while true; do sleep 0.2; done\']', 'resources: {memory: 256MB.., disk: 1GB..}']);
    const running = await waitForRun(env, name, (s) => s.status === 'RUNNING' && s.jobs[0]?.status === 'RUNNING');
    expect(cgroupsLeft(running)).not.toEqual([]);
    // What `troupe metrics` and troupe_job_memory_limit_bytes show: the job's limit.
    const ref = logRefOf(running, running.jobs[0]!, undefined);
    expect(ref && (await env.backend.usage(ref))).toMatchObject({ memory_limit_bytes: 256 * 1024 ** 2 });
    await env.client.workflow.getHandle(handle.workflowId).terminate('test: terminated from outside Troupe');
    const reaped = await new RunReaper({ client: env.client, backends: { ssh: env.backend }, log: () => undefined }).reapOnce();
    expect(reaped.map((r) => r.run.run_workflow_id)).toEqual([handle.workflowId]);
    expect(cgroupsLeft(running)).toEqual([]);
  });
});
