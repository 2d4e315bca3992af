import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobDirectory, runDirectory } from '../../src/backends/ssh/job-paths';
import { TroupeClient, type JobState, type RunState } from '../../src/client';
import { FleetClient } from '../../src/fleet/fleet-client';
import { JobLayout } from '../../src/runner/job-layout';
import { testHostSized } from '../helpers/plans';
import { uniqueTaskQueue } from '../helpers/temporal';
import { kill9 } from '../helpers/worker-process-control';
import { allUp, askRouter, serverPidIn, servicePlan, waitForLine } from './local-heal-fixtures';
import { waitFor } from './local-fixtures';
import { applyFleetYaml, expectAllClean, fleetYaml, startCliWorker, startSshFleetEnv, waitForRun, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * A decode node that fails on an SSH fleet (real sshd hosts, 5 hosts for 3 nodes) is replaced on
 * another host at its rank while the router and prefill keep running: the router's hook sees the
 * new address, a request goes through it, and the failed host is given back with the failed
 * attempt's log kept. The same with the worker killed with SIGKILL in the middle of the restart.
 */

const HOSTS = ['h0', 'h1', 'h2', 'h3', 'h4'];

let env: SshFleetEnv;
const savedKnownHosts = process.env.TROUPE_KNOWN_HOSTS;

beforeAll(async () => {
  env = await startSshFleetEnv(HOSTS.map((name) => ({ name })));
  process.env.TROUPE_KNOWN_HOSTS = env.hosts.knownHostsFile;
}, 120_000);

afterAll(async () => {
  if (savedKnownHosts === undefined) delete process.env.TROUPE_KNOWN_HOSTS;
  else process.env.TROUPE_KNOWN_HOSTS = savedKnownHosts;
  await env?.close();
}, 120_000);

/** Who serves the run and its fleet: the in-process worker of the env, or a `troupe worker` process of its own. */
interface Served {
  fleets: FleetClient;
  troupe: TroupeClient;
  name: string;
}

const ipOf = (job: JobState | undefined): string => job?.instance?.internal_ip ?? '';

/** The test host a job runs on. */
function hostOf(job: JobState | undefined): string {
  const name = HOSTS.find((n) => env.hosts.host(n).address === ipOf(job));
  if (!name) throw new Error(`job ${job?.job_num} is on no test host (${ipOf(job)})`);
  return name;
}

/** The python server a job runs, found in its host's network namespace. */
const serverPid = (job: JobState | undefined): number => serverPidIn(env.hosts.host(hostOf(job)).namespace);

/** The stand-in servers running on each host (nothing may run twice). */
async function serversByHost(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const name of HOSTS) {
    const count = (await env.hosts.jobProcesses(name)).filter((p) => p.command === 'python3 -').length;
    if (count > 0) out[name] = count;
  }
  return out;
}

/**
 * Something done to the run while decode/0 is replaced, once the replacement has `status`; the
 * replacement is held there until `act` is done. PULLING: it has its new host, which is frozen
 * (every process SIGSTOPped), so its runner does not answer; RUNNING: started, its probe fails.
 */
interface Interruption {
  status: 'PULLING' | 'RUNNING';
  act: () => Promise<void>;
}

/**
 * The scenario: the PD service on a fleet of 5 hosts, decode/0's server killed, the replacement
 * perhaps interrupted. Leaves nothing behind when it fails (the run stopped, the fleet deleted).
 */
async function healScenario(served: Served, interruption: Interruption | null): Promise<void> {
  const fleet = `${served.name}-${env.taskQueue.slice(-6)}`;
  const run = `${served.name}-run-${env.taskQueue.slice(-6)}`;
  const hookLog = `${env.dir}/${run}-hooks.log`;
  // While this file exists decode's probe fails: the replacement stays RUNNING, not READY.
  const holdBack = `${env.dir}/${run}-hold-back`;
  try {
    const applied = await applyFleetYaml({ ...env, fleets: served.fleets }, fleetYaml(env, fleet, HOSTS));
    expect(applied.hosts.map((h) => h.status)).toEqual(HOSTS.map(() => 'ready'));
    const decodeGroup = { on_failure: { action: 'restart-node' as const, max_restarts: 2, within_s: null }, ...(interruption?.status === 'RUNNING' ? { ready: heldBackProbe(holdBack) } : {}) };
    const plan = servicePlan(run, decodeGroup, { hookLog, resources: testHostSized });
    // Past 100 events (the restart takes it there) the run continues as new once quiet: the checks
    // after the restart are made of the execution that took the running jobs up.
    const handle = await served.troupe.submit({ plan, fleets: [fleet], options: { stop_grace_s: 1, continue_as_new_after_events: 100 } });

    const before = await waitForRun(served, run, allUp);
    const [router, prefill, decode] = before.jobs;
    expect(new Set([router, prefill, decode].map(hostOf)).size).toBe(3);
    const routerPid = serverPid(router);
    const prefillPid = serverPid(prefill);
    expect(await askRouter(ipOf(router))).toMatchObject({ text: 'Hello, world', decode: 'decode/0' });

    if (interruption?.status === 'RUNNING') writeFileSync(holdBack, '');
    const spares = HOSTS.filter((n) => ![router, prefill, decode].map(hostOf).includes(n));
    if (interruption?.status === 'PULLING') for (const name of spares) await env.hosts.freezeHost(name);
    process.kill(serverPid(decode), 'SIGKILL');
    if (interruption) {
      const at = interruption.status;
      await waitForRun(served, run, (s) => s.jobs[2]?.attempt === 1 && s.jobs[2].status === at, 60_000);
      // Held there: still so a moment later.
      await new Promise((r) => setTimeout(r, 1_000));
      expect((await served.troupe.run(run).state()).jobs[2]).toMatchObject({ attempt: 1, status: at });
      await interruption.act();
      rmSync(holdBack, { force: true });
      for (const name of spares) await env.hosts.thawHost(name);
    }
    const healed = await waitForRun(served, run, (s) => s.jobs[2]?.attempt === 1 && s.jobs[2].status === 'READY');
    const replacement = healed.jobs[2];
    expect(replacement).toMatchObject({ group_name: 'decode', group_job_index: 0, restarts: 1 });
    expect(healed.groups[2]?.restarts).toBe(1);
    expect(hostOf(replacement)).not.toBe(hostOf(decode));
    expect([hostOf(router), hostOf(prefill)]).not.toContain(hostOf(replacement));
    expect(replacement?.previous_attempts[0]).toMatchObject({ attempt: 0, status: 'FAILED', exit_code: 137 });
    expect(healed.peers_version).toBeGreaterThan(before.peers_version);

    // The router's hook saw the new address; a request goes through the new decode node.
    await waitForLine(hookLog, (line) => line.endsWith(` ${ipOf(replacement)}`));
    await waitFor('the hand-over to a new execution', async () => ((await handle.describe()).runId !== before.run_uid ? true : undefined), 60_000);
    expect(await served.troupe.run(run).state()).toMatchObject({ status: 'RUNNING', run_uid: before.run_uid });
    expect(await askRouter(ipOf(router))).toMatchObject({ text: 'Hello, world', decode: 'decode/0' });
    expect(serverPid(router)).toBe(routerPid);
    expect(serverPid(prefill)).toBe(prefillPid);
    expect(healed.jobs[0]).toMatchObject({ attempt: 0, pid: router?.pid, restarts: 0 });
    expect(healed.jobs[1]).toMatchObject({ attempt: 0, pid: prefill?.pid, restarts: 0 });
    expect(await serversByHost()).toEqual({ [hostOf(router)]: 1, [hostOf(prefill)]: 1, [hostOf(replacement)]: 1 });

    // The failed attempt's host is free again, nothing runs there, and only its log, exit code
    // and start mark are left of its job directory.
    await expectReleased(served, fleet, before, decode);

    await handle.stop();
    expect((await handle.wait()).termination_reason).toBe('STOPPED_BY_USER');
    await expectAllClean({ ...env, fleets: served.fleets }, fleet);
  } finally {
    for (const name of HOSTS) await env.hosts.thawHost(name);
    await served.troupe.run(run).stop().catch(() => undefined);
    const end = await served.troupe.run(run).wait().catch(() => null);
    // What teardown keeps (logs) goes with the hosts' folders, or here from the default one.
    const bases = new Set(end?.jobs.flatMap((j) => [j, ...j.previous_attempts]).flatMap((j) => j.instance?.details.base_dir ?? []));
    for (const base of bases) if (end) rmSync(runDirectory(base, end.run_uid), { recursive: true, force: true });
    await served.fleets.delete(fleet, { force: true }).catch(() => undefined);
  }
}

/** decode's probe: its server answers, and the test does not hold it back. */
function heldBackProbe(holdBack: string) {
  const answers = `python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8000/", timeout=2)'`;
  return { check: { kind: 'command' as const, command: `[ ! -e ${holdBack} ] && ${answers}` }, interval_s: 0.3, timeout_s: 180 };
}

async function expectReleased(served: Served, fleet: string, state: RunState, job: JobState | undefined): Promise<void> {
  const address = ipOf(job);
  const deadline = Date.now() + 30_000;
  for (;;) {
    const host = (await served.fleets.state(fleet))?.hosts.find((h) => h.spec.target.hostname === address);
    if (host && host.holder === null) break;
    if (Date.now() > deadline) throw new Error(`host ${address} still held by ${JSON.stringify(host?.holder)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  expect(await env.hosts.jobProcesses(hostOf(job))).toEqual([]);
  const baseDir = job?.instance?.details.base_dir ?? '';
  const dir = jobDirectory(baseDir, { run_id: state.run_uid, submission: state.submission, job_name: job?.job_name ?? '', attempt: 0 });
  expect(readdirSync(dir).sort()).toEqual([JobLayout.exitCode, JobLayout.log, JobLayout.started]);
}

describe('restart-node on an SSH fleet', () => {
  it('a killed decode server: decode/0 again on another host, READY; the router told by its hook; router and prefill keep their pids; the old host released', async () => {
    await healScenario({ fleets: env.fleets, troupe: env.troupe, name: 'heal' }, null);
  }, 240_000);

  it.each(['PULLING', 'RUNNING'] as const)('kill -9 of the worker while the replacement is %s: the same outcome, nothing started twice', async (status) => {
    // `troupe worker` as users run it, serving the fleet and the run on a task queue of its own.
    const taskQueue = uniqueTaskQueue('ssh-heal-kill');
    const stateDir = mkdtempSync(join(tmpdir(), 'troupe-ssh-heal-worker-'));
    const start = () => startCliWorker({ TROUPE_TASK_QUEUE: taskQueue, TROUPE_STATE_DIR: stateDir, TROUPE_KNOWN_HOSTS: env.hosts.knownHostsFile });
    let worker: ChildProcess = await start();
    try {
      const served = { fleets: new FleetClient(env.client, { taskQueue }), troupe: new TroupeClient(env.client, { taskQueue }), name: `heal-kill-${status.toLowerCase()}` };
      await healScenario(served, {
        status,
        act: async () => {
          await kill9(worker);
          worker = await start();
        },
      });
    } finally {
      await kill9(worker);
      rmSync(stateDir, { recursive: true, force: true });
    }
  }, 300_000);
});

describe('a resize an SSH fleet has no room for', () => {
  it('is refused before anything changes, naming the fleet, the group, how many fit and each host; a resize within the room still works', async () => {
    const fleet = `room-${env.taskQueue.slice(-6)}`;
    const run = `room-run-${env.taskQueue.slice(-6)}`;
    try {
      await applyFleetYaml(env, fleetYaml(env, fleet, HOSTS));
      const plan = servicePlan(run, { nodes: 1, nodes_range: { min: 1, max: 4 } }, { hookLog: `${env.dir}/${run}-hooks.log`, resources: testHostSized });
      const handle = await env.troupe.submit({ plan, fleets: [fleet], options: { stop_grace_s: 1 } });
      const before = await waitForRun(env, run, allUp);

      // 5 hosts, 3 held by the run: decode grows by 2 at most.
      const err: unknown = await handle.scaleGroup('decode', 4).then(() => null, (e: unknown) => e);
      const message = err instanceof Error ? err.message : String(err);
      expect(message).toMatch(new RegExp(`^run ${run} did not scale group "decode" to 4: fleet ${fleet} has room for 2 more decode nodes, not 3: hosts for cpu 1\\.\\., memory 1GB\\.\\., disk 1GB\\.\\.: `));
      expect(message.split(`held by ${run}`)).toHaveLength(4);
      expect(message.split(': fits')).toHaveLength(3);
      const unchanged = await handle.state();
      expect(unchanged.jobs.map((j) => [j.job_num, j.attempt, j.status])).toEqual(before.jobs.map((j) => [j.job_num, j.attempt, j.status]));
      expect(unchanged.peers_version).toBe(before.peers_version);
      expect(unchanged.groups[2]?.nodes).toBe(1);

      expect(await handle.scaleGroup('decode', 3)).toMatchObject({ nodes: 3, added: [3, 4] });
      expect((await env.fleets.state(fleet))?.hosts.every((h) => h.holder?.run_name === run)).toBe(true);
      await handle.stop();
      expect((await handle.wait()).termination_reason).toBe('STOPPED_BY_USER');
      await expectAllClean(env, fleet);
    } finally {
      await env.troupe.run(run).stop().catch(() => undefined);
      const end = await env.troupe.run(run).wait().catch(() => null);
      const bases = new Set(end?.jobs.flatMap((j) => [j, ...j.previous_attempts]).flatMap((j) => j.instance?.details.base_dir ?? []));
      for (const base of bases) if (end) rmSync(runDirectory(base, end.run_uid), { recursive: true, force: true });
      await env.fleets.delete(fleet, { force: true }).catch(() => undefined);
    }
  }, 240_000);
});
