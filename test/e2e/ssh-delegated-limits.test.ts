import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { closeAllSshSessions } from '../../src/backends/ssh';
import { sshRunCgroupPrefix } from '../../src/backends/ssh/job-cgroup-script';
import { runDirectory } from '../../src/backends/ssh/job-paths';
import { TroupeClient, type RunState } from '../../src/client';
import { FleetClient } from '../../src/fleet/fleet-client';
import { fleetSpecOf } from '../../src/fleet/fleet-spec';
import { SshBackend } from '../../src/fleet/ssh-backend';
import { loadFleetConfig } from '../../src/plan';
import { RunReaper } from '../../src/worker/run-reaper';
import { testClient, uniqueTaskQueue } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';
import { createTestHosts, testHostsFleetYaml, type TestHosts } from './hosts';
import { FAST_SSH, expectAllClean, waitForRun, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * Issue 37, part 1, on an SSH host whose SSH user is not root (a real sshd in a network namespace):
 * where an admin delegated a cgroup v1 subtree to the user (mkdir + chown, as root, once), a job
 * runs in a cgroup of its own under it with its group's `resources` as limits; without one, the
 * job runs without limits and its log says why and how to delegate. This machine has cgroup v1 only.
 */

const isRoot = process.getuid?.() === 0;
const V1 = ['memory', 'cpu', 'pids', 'cpuacct'].filter((c) => existsSync(`/sys/fs/cgroup/${c}/cgroup.procs`));
const PIDS_MAX = 64;
/** Two users of the test's own: one the admin delegated a subtree to, one not. */
const tag = `${process.pid}${Math.random().toString(36).slice(2, 6)}`;
const DELEGATED = `trcgd${tag}`;
const PLAIN = `trcgp${tag}`;
const made: { users: string[]; cgroups: string[]; home: string | null } = { users: [], cgroups: [], home: null };

let env: SshFleetEnv | undefined;
/** A fleet of host `a` per user, logging in as that user: made once, each test leaves it free. */
const fleetOf = new Map<string, string>();
let counter = 0;

function sh(command: string, args: string[]): void {
  const out = spawnSync(command, args, { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`${command} ${args.join(' ')}: ${out.stderr}`);
}

/** What an admin does once per host, as root: a directory in each hierarchy, it and the files a process joins by given to the user. */
function delegateV1(user: string): void {
  for (const c of V1) {
    const d = `/sys/fs/cgroup/${c}/troupe-${user}`;
    mkdirSync(d);
    made.cgroups.push(d);
    sh('chown', [user, d, `${d}/cgroup.procs`, `${d}/tasks`]);
  }
}

/** The run's cgroups left under the user's delegated subtree, in any hierarchy. */
function cgroupsLeft(user: string, state: RunState): string[] {
  const prefix = sshRunCgroupPrefix(runDirectory(`${made.home}/${user}/.troupe/jobs`, state.run_uid));
  return V1.flatMap((c) => {
    const d = `/sys/fs/cgroup/${c}/troupe-${user}`;
    return existsSync(d) ? readdirSync(d).filter((e) => e.startsWith(prefix)).map((e) => join(d, e)) : [];
  });
}

beforeAll(async () => {
  if (!isRoot || V1.length < 3) return;
  made.home = mkdtempSync(join(tmpdir(), 'troupe-cgdeleg-'));
  chmodSync(made.home, 0o755);
  for (const user of [DELEGATED, PLAIN]) {
    // A password field of `*`: no password, but not a locked account (sshd without PAM refuses those).
    sh('useradd', ['-m', '-d', join(made.home, user), '-s', '/bin/bash', '-p', '*', user]);
    made.users.push(user);
  }
  delegateV1(DELEGATED);
  const hosts: TestHosts = await createTestHosts([{ name: 'a', skipBashrc: true }]);
  // Every user's key list is the harness's one file (AuthorizedKeysFile), which sshd reads as the user.
  chmodSync(dirname(hosts.clientKeyPath), 0o711);
  chmodSync(join(dirname(hosts.clientKeyPath), 'authorized_keys'), 0o644);
  const dir = mkdtempSync(join(tmpdir(), 'troupe-cgdeleg-fleet-'));
  const { client, close: closeClient } = await testClient();
  const taskQueue = uniqueTaskQueue('ssh-cgdeleg');
  const fleets = new FleetClient(client, { taskQueue });
  // Jobs in each user's own ~/.troupe/jobs, as on a real host.
  const backend = new SshBackend({ fleets, timeouts: FAST_SSH, unreachableLimitMs: 3_000, releaseGraceSeconds: 2, pidsMax: PIDS_MAX });
  const worker = await startTroupeWorker({ ssh: backend }, taskQueue);
  vi.stubEnv('TROUPE_KNOWN_HOSTS', hosts.knownHostsFile);
  // Stopped in this order: the worker, then the connections it used, then the hosts they reached.
  const stops = [() => worker.stop(), closeAllSshSessions, closeClient, () => hosts.destroy()];
  env = {
    hosts, client, fleets, backend, troupe: new TroupeClient(client, { taskQueue }), taskQueue, dir,
    close: async () => {
      for (const stop of stops) await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  for (const user of made.users) {
    const name = `cg-${user}`;
    const yaml = testHostsFleetYaml(hosts, name, ['a']).replace('\n  user: root\n', `\n  user: ${user}\n`);
    const file = join(dir, `${name}.yml`);
    writeFileSync(file, yaml);
    await fleets.apply(fleetSpecOf(loadFleetConfig(yaml, file, { environ: {} }), file));
    fleetOf.set(user, name);
  }
}, 120_000);

afterEach(async () => {
  for (const fleet of fleetOf.values()) if (env) await expectAllClean(env, fleet);
});

afterAll(async () => {
  for (const fleet of fleetOf.values()) await env?.fleets.delete(fleet, { force: true });
  vi.unstubAllEnvs();
  await env?.close();
  for (const user of made.users) {
    for (const pid of pidsOf(uidOf(user))) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
    spawnSync('userdel', [user]);
  }
  for (const d of made.cgroups.reverse()) {
    for (const leftover of existsSync(d) ? readdirSync(d, { withFileTypes: true }).filter((e) => e.isDirectory()) : []) rmdirSync(join(d, leftover.name));
    if (existsSync(d)) rmdirSync(d);
  }
  if (made.home) rmSync(made.home, { recursive: true, force: true });
});

function sshEnv(): SshFleetEnv {
  if (!env) throw new Error('the SSH test host was not made');
  return env;
}

/** Submits a one-node task to the fleet of host `a` that logs in as `user`. */
async function submitAs(user: string, prefix: string, lines: string[]) {
  counter += 1;
  const name = `${prefix}-${counter}-${sshEnv().taskQueue.slice(-6)}`;
  const task = ['type: task', `name: ${name}`, ...lines, ''].join('\n');
  return { name, handle: await sshEnv().troupe.submit({ yaml: task, fleets: [fleetOf.get(user) ?? ''], checkWorkers: false }) };
}

async function runAs(user: string, prefix: string, lines: string[]): Promise<{ state: RunState; log: string }> {
  const { name, handle } = await submitAs(user, prefix, lines);
  const state = await handle.wait();
  return { state, log: (await sshEnv().troupe.run(name).readLog(0)).data };
}

describe.skipIf(!isRoot || V1.length < 3)('limits on an SSH host whose SSH user is not root', () => {
  it("with a delegated v1 subtree: a job that holds 512 MiB under `memory: 256MB..` ends FAILED with 'out of memory: limit 256 MiB'; its cgroup is gone after the run", async () => {
    const { state, log } = await runAs(DELEGATED, 'dg-oom', [
      'commands:',
      `  - perl -e '$x = "x" x (512 * 1024 * 1024); sleep 1'`,
      '  - echo survived',
      'resources: {memory: 256MB.., disk: 1GB..}',
    ]);
    expect(state.status, `${JSON.stringify(state, null, 2)}\n${log}`).toBe('FAILED');
    expect(state.jobs[0]).toMatchObject({ status: 'FAILED', exit_code: 137, message: 'out of memory: limit 256 MiB (exit code 137)' });
    expect(log).not.toContain('survived');
    expect(log).not.toContain('not applied');
    expect(cgroupsLeft(DELEGATED, state)).toEqual([]);
  });

  it('with a delegated v1 subtree: the job runs as the user in its cgroup under it, and its pids limit holds (forks past it fail)', async () => {
    const script = [
      'echo "user=$(id -un)"',
      'while IFS=: read -r _ ctl path; do',
      '  case $ctl in',
      '    memory) echo "memory=$(cat /sys/fs/cgroup/memory$path/memory.limit_in_bytes)" "in=$path" ;;',
      '    pids) echo "pids=$(cat /sys/fs/cgroup/pids$path/pids.max)" ;;',
      '  esac',
      'done < /proc/self/cgroup',
      // Children that wait until the parent has tried them all: the job's processes at once.
      `perl -e 'my $n = 0; for (1..${PIDS_MAX * 2}) { my $p = fork(); last unless defined $p; if (!$p) { sleep 3; exit 0 } $n++ } print "forked=$n\\n"; 1 while wait() > 0'`,
    ];
    const { state, log } = await runAs(DELEGATED, 'dg-pids', ['commands:', '  - |', ...script.map((l) => `    ${l}`), 'resources: {memory: 1GB.., disk: 1GB..}']);
    expect(state.status, `${JSON.stringify(state, null, 2)}\n${log}`).toBe('DONE');
    const values = Object.fromEntries(log.split(/[\n ]/).flatMap((w) => (/^(user|memory|pids|in|forked)=/.test(w) ? [w.split('=') as [string, string]] : [])));
    const prefix = sshRunCgroupPrefix(runDirectory(`${made.home}/${DELEGATED}/.troupe/jobs`, state.run_uid));
    expect(values, log).toMatchObject({ user: DELEGATED, memory: String(1024 ** 3), pids: String(PIDS_MAX), in: expect.stringMatching(new RegExp(`^/troupe-${DELEGATED}/${prefix}[0-9a-f]{16}$`)) });
    expect(Number(values.forked), log).toBeGreaterThan(0);
    expect(Number(values.forked), log).toBeLessThan(PIDS_MAX);
    expect(log).not.toContain('not applied');
    expect(cgroupsLeft(DELEGATED, state)).toEqual([]);
  });

  it("with a delegated v1 subtree: a run terminated in Temporal: the reaper's release kills what runs in the job's cgroup and removes it", async () => {
    const { name, handle } = await submitAs(DELEGATED, 'dg-reaped', ["commands: ['while true; do sleep 0.2; done']", 'resources: {memory: 256MB.., disk: 1GB..}']);
    const e = sshEnv();
    const running = await waitForRun(e, name, (s) => s.status === 'RUNNING' && s.jobs[0]?.status === 'RUNNING');
    expect(cgroupsLeft(DELEGATED, running)).not.toEqual([]);
    await e.client.workflow.getHandle(handle.workflowId).terminate('test: terminated from outside Troupe');
    const reaped = await new RunReaper({ client: e.client, backends: { ssh: e.backend }, log: () => undefined }).reapOnce();
    expect(reaped.map((r) => r.run.run_workflow_id)).toEqual([handle.workflowId]);
    expect(cgroupsLeft(DELEGATED, running)).toEqual([]);
  });

  it('without a delegated subtree: the job runs without limits, and the first line of its log says why and how an admin delegates one', async () => {
    const { state, log } = await runAs(PLAIN, 'dg-none', ['commands: ["echo ran as $(id -un)"]', 'resources: {memory: 256MB.., disk: 1GB..}']);
    expect(state.status, `${JSON.stringify(state, null, 2)}\n${log}`).toBe('DONE');
    const host = sshEnv().hosts.host('a');
    expect(log.split('\n')[0]).toBe(
      `troupe: resource limits (memory, cpu, pids) are not applied to this job: the SSH user of ${PLAIN}@${host.address}:${host.port} is not root (uid ${uidOf(PLAIN)}) and has no cgroup subtree delegated to it: /sys/fs/cgroup/memory/troupe-${PLAIN} is missing; ` +
        `to delegate one, as root, for c in memory cpu pids (and cpuacct): mkdir /sys/fs/cgroup/$c/troupe-${PLAIN} && chown ${PLAIN} /sys/fs/cgroup/$c/troupe-${PLAIN}{,/cgroup.procs,/tasks} (README: Security)`,
    );
    expect(log).toContain(`ran as ${PLAIN}`);
  });
});

/** The pids of processes whose real uid is `uid` (the test's own users only). */
function pidsOf(uid: string): number[] {
  if (!/^\d+$/.test(uid)) return [];
  return readdirSync('/proc').filter((p) => /^\d+$/.test(p)).flatMap((p) => {
    try {
      return new RegExp(`^Uid:\\t${uid}\\t`, 'm').test(readFileSync(`/proc/${p}/status`, 'utf8')) ? [Number(p)] : [];
    } catch {
      return [];
    }
  });
}

function uidOf(user: string): string {
  return spawnSync('id', ['-u', user], { encoding: 'utf8' }).stdout.trim();
}
