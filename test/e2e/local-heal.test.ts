import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import type { WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { TroupeClient } from '../../src/client';
import { runWorkflowId } from '../../src/contract/ids';
import { runStateQuery, scaleGroupUpdate, stopRunSignal, type RunOptionsInput } from '../../src/contract/messages';
import type { GroupPlan, Plan } from '../../src/plan/plan-schema';
import { makePlan } from '../helpers/plans';
import type { JobState, RunState } from '../../src/contract/run-state';
import { pidAlive } from '../helpers/local-fleet';
import { temporalAddress } from '../helpers/temporal';
import { kill9, startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';
import { allUp, askRouter, hookLines, serverPidIn, servicePlan, waitForLine } from './local-heal-fixtures';
import { waitFor } from './local-fixtures';

/**
 * Groups that heal and scale while the run goes on, on the local fleet (network namespaces, real
 * processes, worker processes killed with SIGKILL): a decode node killed is replaced at its rank
 * while the router and prefill keep running; its budget's end fails the run; decode resized
 * 1 → 3 → 2; a quorum lets the router start before the last prefill node is READY; a run whose
 * history grows long continues as new without restarting a process.
 */

const env = useWorkerProcesses('heal');
const { fleet, shared, taskQueue, workers } = env;
const started: string[] = [];

async function startWorker(): Promise<ChildProcess> {
  const child = await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir });
  workers.push(child);
  return child;
}

async function startRun(name: string, plan: Plan, options: RunOptionsInput = {}): Promise<WorkflowHandleWithFirstExecutionRunId> {
  started.push(name);
  return await env.client.workflow.start('RunWorkflow', {
    taskQueue,
    workflowId: runWorkflowId(name),
    args: [{ plan, backend: 'local', options: { stop_grace_s: 1, ...options } }],
  });
}

// Runs a failed test left going are stopped by a worker of their own before the fleet is removed.
afterAll(async () => {
  const worker = await startWorker();
  for (const name of started) {
    const handle = env.client.workflow.getHandle(runWorkflowId(name));
    const state = (await handle.query(runStateQuery).catch(() => null)) as RunState | null;
    if (!state || ['DONE', 'FAILED', 'TERMINATED'].includes(state.status)) continue;
    await handle.signal(stopRunSignal, { abort: false }).catch(() => undefined);
    await handle.result().catch(() => undefined);
  }
  await kill9(worker);
}, 120_000);

const netnsOf = (job: JobState | undefined): string => {
  const netns = job?.instance?.details.netns;
  if (!netns) throw new Error(`job ${job?.job_num} has no namespace`);
  return netns;
};
const ipOf = (job: JobState | undefined): string => job?.instance?.internal_ip ?? '';

/** `troupe stop` of a run that has not ended on its own: it ends STOPPED_BY_USER. */
async function expectStopped(handle: WorkflowHandle): Promise<void> {
  await handle.signal(stopRunSignal, { abort: false });
  expect(((await handle.result()) as RunState).termination_reason).toBe('STOPPED_BY_USER');
}

/** `troupe scale …` and the like, as a user runs it, against this file's workers. */
function troupeCli(...args: string[]): Promise<{ code: number; stderr: string }> {
  const child = spawn(process.execPath, ['bin/troupe.js', ...args], {
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
    env: { ...process.env, TEMPORAL_ADDRESS: temporalAddress(), TROUPE_TASK_QUEUE: taskQueue, NO_COLOR: '1' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code: code ?? 1, stderr })));
}

/** The reason an Update was refused with (the validator's message, in the failure's cause). */
async function refusal(update: Promise<unknown>): Promise<string> {
  const err: unknown = await update.then(() => null, (e: unknown) => e);
  if (!(err instanceof Error)) throw new Error('the update was accepted');
  return err.cause instanceof Error ? err.cause.message : err.message;
}

describe('a decode node that fails is replaced while the run goes on', () => {
  it('restart-node: a new machine at rank 2, READY again, the router told by its hook; the router and prefill keep their pids; past the budget the run fails', async () => {
    const worker = await startWorker();
    const hookLog = `${shared.dir}/restart-hooks.log`;
    const name = `heal-restart-${taskQueue}`;
    const handle = await startRun(name, servicePlan(name, { on_failure: { action: 'restart-node', max_restarts: 2, within_s: null } }, { hookLog }));
    const before = await waitForRunState(handle, allUp);
    const [router, prefill, decode] = before.jobs;
    const routerPid = serverPidIn(netnsOf(router));
    const prefillPid = serverPidIn(netnsOf(prefill));
    expect((await askRouter(ipOf(router))).text).toBe('Hello, world');

    process.kill(serverPidIn(netnsOf(decode)), 'SIGKILL');
    const healed = await waitForRunState(handle, (s) => s.jobs[2]?.attempt === 1 && s.jobs[2].status === 'READY');
    const replacement = healed.jobs[2];
    expect(replacement?.restarts).toBe(1);
    expect(healed.groups[2]?.restarts).toBe(1);
    expect(ipOf(replacement)).not.toBe(ipOf(decode));
    expect(replacement?.previous_attempts[0]).toMatchObject({ attempt: 0, status: 'FAILED', exit_code: 137 });
    // The replaced machine was given back.
    await waitForRunState(handle, () => !existsSync(`/run/netns/${netnsOf(decode)}`));
    // The router's hook saw the new address, and a request goes through the new decode node.
    await waitForLine(hookLog, (line) => line.endsWith(` ${ipOf(replacement)}`));
    expect((await askRouter(ipOf(router))).text).toBe('Hello, world');
    expect(serverPidIn(netnsOf(router))).toBe(routerPid);
    expect(serverPidIn(netnsOf(prefill))).toBe(prefillPid);
    expect(healed.jobs[0]).toMatchObject({ attempt: 0, pid: router?.pid, restarts: 0 });
    expect(healed.jobs[1]).toMatchObject({ attempt: 0, pid: prefill?.pid, restarts: 0 });
    expect(healed.peers_version).toBeGreaterThan(before.peers_version);

    // Two more failures: the second restart is the last the budget allows, the third fails the run.
    process.kill(serverPidIn(netnsOf(replacement)), 'SIGKILL');
    const second = await waitForRunState(handle, (s) => s.jobs[2]?.attempt === 2 && s.jobs[2].status === 'READY');
    process.kill(serverPidIn(netnsOf(second.jobs[2])), 'SIGKILL');
    const end = (await handle.result()) as RunState;
    expect(end.status).toBe('FAILED');
    expect(end.message).toMatch(/^group decode: restart budget exhausted \(2 of max_restarts 2\); last failure: job 2 \(decode\/0\) on local failed: CONTAINER_EXITED_WITH_ERROR: exited with code 137/);
    expect(pidAlive(routerPid)).toBe(false);
    await kill9(worker);
  }, 240_000);

  it('kill -9 of the worker during a restart: the same outcome, each attempt started once', async () => {
    let worker = await startWorker();
    const hookLog = `${shared.dir}/crash-hooks.log`;
    const name = `heal-crash-${taskQueue}`;
    const handle = await startRun(name, servicePlan(name, { on_failure: { action: 'restart-node', max_restarts: 3, within_s: 600 } }, { hookLog }));
    const before = await waitForRunState(handle, allUp);
    const routerPid = serverPidIn(netnsOf(before.jobs[0]));
    process.kill(serverPidIn(netnsOf(before.jobs[2])), 'SIGKILL');
    await waitForRunState(handle, (s) => s.jobs[2]?.attempt === 1);
    await kill9(worker);
    worker = await startWorker();
    const healed = await waitForRunState(handle, (s) => s.jobs[2]?.attempt === 1 && s.jobs[2].status === 'READY');
    expect(healed.jobs[2]?.restarts).toBe(1);
    // One server in the new node, none in the old one's namespace (gone), the router untouched.
    expect(() => serverPidIn(netnsOf(healed.jobs[2]))).not.toThrow();
    await waitForRunState(handle, () => !existsSync(`/run/netns/${netnsOf(before.jobs[2])}`));
    await waitForLine(hookLog, (line) => line.endsWith(` ${ipOf(healed.jobs[2])}`));
    expect(serverPidIn(netnsOf(healed.jobs[0]))).toBe(routerPid);
    expect((await askRouter(ipOf(healed.jobs[0]))).text).toBe('Hello, world');
    await expectStopped(handle);
    await kill9(worker);
  }, 240_000);
});

describe('a group that restarts whole, and a dependent that restarts with it', () => {
  it('restart-group on decode (2 nodes), on_dependency_restart: restart on the router: both decode nodes replaced, the router restarted after they are READY, prefill untouched', async () => {
    const worker = await startWorker();
    const name = `heal-group-${taskQueue}`;
    const plan = servicePlan(
      name,
      { nodes: 2, on_failure: { action: 'restart-group', max_restarts: 1, within_s: null } },
      { hookLog: `${shared.dir}/group-hooks.log`, router: { on_dependency_restart: 'restart' } },
    );
    const handle = await startRun(name, plan);
    const before = await waitForRunState(handle, allUp);
    const prefillPid = serverPidIn(netnsOf(before.jobs[1]));
    process.kill(serverPidIn(netnsOf(before.jobs[3])), 'SIGKILL');
    const after = await waitForRunState(handle, (s) => allUp(s) && s.jobs[0]?.attempt === 1 && s.jobs[2]?.attempt === 1 && s.jobs[3]?.attempt === 1);
    const [router, , decode0, decode1] = after.jobs;
    expect(decode1?.previous_attempts[0]).toMatchObject({ status: 'FAILED', exit_code: 137 });
    expect(decode0?.previous_attempts[0]).toMatchObject({ status: 'TERMINATED', message: 'restarted with group decode after decode/1 failed' });
    expect(router?.previous_attempts[0]?.message).toBe('restarted because prefill, decode restarted (on_dependency_restart: restart)');
    // The router started again only once both new decode nodes were READY.
    const decodeReady = Math.max(Date.parse(decode0?.ready_at ?? ''), Date.parse(decode1?.ready_at ?? ''));
    expect(Date.parse(router?.running_at ?? '')).toBeGreaterThanOrEqual(decodeReady);
    expect(after.groups[2]?.restarts).toBe(1);
    expect(after.jobs[1]).toMatchObject({ attempt: 0, restarts: 0 });
    expect(serverPidIn(netnsOf(after.jobs[1]))).toBe(prefillPid);
    expect((await askRouter(ipOf(router))).text).toBe('Hello, world');
    await expectStopped(handle);
    await kill9(worker);
  }, 240_000);
});

describe('a group that restarts whole follows the run\'s startup_order', () => {
  it('master-first: its master (first rank) runs before its other nodes start; workers-first: after all of them', async () => {
    const worker = await startWorker();
    const sleeper = `python3 -c 'import time; time.sleep(3600)'`;
    for (const order of ['master-first', 'workers-first'] as const) {
      const name = `heal-${order}-${taskQueue}`;
      const plan = makePlan(name, [{ name: 'head', nodes: 1, commands: [sleeper] }, { name: 'workers', nodes: 3, commands: [sleeper] }], { startup_order: order });
      Object.assign(plan.groups[1] as GroupPlan, { on_failure: { action: 'restart-group', max_restarts: 1, within_s: null } });
      const handle = await startRun(name, plan);
      const before = await waitForRunState(handle, (s) => s.status === 'RUNNING' && s.jobs.every((j) => j.status === 'RUNNING'));
      process.kill(serverPidIn(netnsOf(before.jobs[3])), 'SIGKILL');
      const after = await waitForRunState(handle, (s) => [1, 2, 3].every((n) => s.jobs[n]?.attempt === 1 && s.jobs[n]?.status === 'RUNNING'));
      const runningAt = (n: number) => Date.parse(after.jobs[n]?.running_at ?? '');
      // Rank 1 is the group's master; its new attempt starts before (after) the others' by the run's order.
      for (const other of [2, 3]) {
        if (order === 'master-first') expect(runningAt(other), `${order}: job ${other}`).toBeGreaterThan(runningAt(1));
        else expect(runningAt(other), `${order}: job ${other}`).toBeLessThan(runningAt(1));
      }
      expect(after.jobs[0]).toMatchObject({ attempt: 0, status: 'RUNNING' });
      expect(after.groups[1]?.restarts).toBe(1);
      await expectStopped(handle);
    }
    await kill9(worker);
  }, 240_000);
});

describe('resizing a running group', () => {
  it('decode 1 → 3 → 2: new ranks after the others, the highest removed, the router told each time', async () => {
    let worker = await startWorker();
    const hookLog = `${shared.dir}/scale-hooks.log`;
    const name = `heal-scale-${taskQueue}`;
    const handle = await startRun(name, servicePlan(name, { nodes: 1, nodes_range: { min: 1, max: 3 } }, { hookLog }));
    const before = await waitForRunState(handle, allUp);
    const routerPid = serverPidIn(netnsOf(before.jobs[0]));

    expect(await refusal(handle.executeUpdate(scaleGroupUpdate, { args: [{ group: 'decode', nodes: 5 }] }))).toBe('group decode takes 1..3 nodes (its nodes range), not 5');
    expect(await refusal(handle.executeUpdate(scaleGroupUpdate, { args: [{ group: 'router', nodes: 2 }] }))).toMatch(/^group router has a fixed size/);

    const up = await handle.executeUpdate(scaleGroupUpdate, { args: [{ group: 'decode', nodes: 3 }] });
    expect(up).toMatchObject({ group: 'decode', nodes: 3, added: [3, 4], removed: [] });
    expect(up.peers_version).toBeGreaterThan(before.peers_version);
    const grown = await handle.query(runStateQuery);
    expect(grown.jobs.slice(3).map((j) => [j.group_name, j.group_job_index, j.status])).toEqual([['decode', 1, 'READY'], ['decode', 2, 'READY']]);
    expect(grown.groups[2]?.nodes).toBe(3);
    const decodeIps = [2, 3, 4].map((n) => ipOf(grown.jobs[n]));
    const grownLine = hookLines(hookLog).at(-1) ?? '';
    expect(grownLine.split(' ')[1]).toBe(String(up.peers_version));
    expect(grownLine.split(' ')[2]?.split(',').sort()).toEqual([...decodeIps].sort());

    // Killed in the middle of the next resize: the next worker finishes it.
    const down = handle.executeUpdate(scaleGroupUpdate, { args: [{ group: 'decode', nodes: 2 }] });
    await new Promise((r) => setTimeout(r, 200));
    await kill9(worker);
    worker = await startWorker();
    expect(await down).toMatchObject({ group: 'decode', nodes: 2, added: [], removed: [4] });
    const shrunk = await handle.query(runStateQuery);
    expect(shrunk.jobs[4]).toMatchObject({ removed: true, status: 'TERMINATED' });
    await waitForRunState(handle, () => !existsSync(`/run/netns/${netnsOf(grown.jobs[4])}`));
    const shrunkLine = hookLines(hookLog).at(-1) ?? '';
    expect(shrunkLine.split(' ')[2]?.split(',').sort()).toEqual([decodeIps[0], decodeIps[1]].sort());
    expect(serverPidIn(netnsOf(shrunk.jobs[0]))).toBe(routerPid);
    // Grown again, the group takes back the rank it gave up.
    const again = await handle.executeUpdate(scaleGroupUpdate, { args: [{ group: 'decode', nodes: 3 }] });
    expect(again.added).toEqual([4]);
    expect((await handle.query(runStateQuery)).jobs[4]).toMatchObject({ removed: false, attempt: 1, status: 'READY' });
    expect((await askRouter(ipOf(shrunk.jobs[0]))).text).toBe('Hello, world');

    await expectStopped(handle);
    await kill9(worker);
  }, 240_000);
});

describe('a resize the fleet has no room for', () => {
  it('is refused before anything changes, by the Update and by `troupe scale` (exit 1); a resize within the room still works', async () => {
    // Four nodes at most: router, prefill and decode take three, so decode can grow by one, not two.
    const child = await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: { TEST_LOCAL_CAPACITY: '4' } });
    workers.push(child);
    const name = `heal-room-${taskQueue}`;
    const handle = await startRun(name, servicePlan(name, { nodes: 1, nodes_range: { min: 1, max: 3 } }, { hookLog: `${shared.dir}/room-hooks.log` }));
    const before = await waitForRunState(handle, allUp);
    const refusedWith = 'the local fleet has room for 1 more decode node, not 2: it holds 4 nodes at most, 3 taken';
    expect(await refusal(handle.executeUpdate(scaleGroupUpdate, { args: [{ group: 'decode', nodes: 3 }] }))).toBe(refusedWith);
    const cli = await troupeCli('scale', name, 'decode', '3');
    expect(cli.code).toBe(1);
    expect(cli.stderr.trim().split('\n').at(-1)).toBe(`run ${name} did not scale group "decode" to 3: ${refusedWith}`);

    const unchanged = await handle.query(runStateQuery);
    const ranks = (s: RunState) => s.jobs.map((j) => [j.job_num, j.group_name, j.group_job_index, j.attempt, j.removed, j.status]);
    expect(ranks(unchanged)).toEqual(ranks(before));
    expect(unchanged.peers_version).toBe(before.peers_version);
    expect(unchanged.groups.map((g) => g.nodes)).toEqual([1, 1, 1]);

    const up = await handle.executeUpdate(scaleGroupUpdate, { args: [{ group: 'decode', nodes: 2 }] });
    expect(up).toMatchObject({ group: 'decode', nodes: 2, added: [3], removed: [] });
    expect(up.peers_version).toBeGreaterThan(before.peers_version);
    expect((await handle.query(runStateQuery)).jobs[3]).toMatchObject({ group_name: 'decode', group_job_index: 1, status: 'READY' });
    await expectStopped(handle);
    await kill9(child);
  }, 240_000);
});

describe('quorum', () => {
  it('prefill of 3 with ready: {min: 2}: the router starts after the second READY, before the third', async () => {
    const worker = await startWorker();
    const gate = `${shared.dir}/open-prefill-2`;
    const name = `heal-quorum-${taskQueue}`;
    // Prefill node 2 is READY only once the test opens its gate, which it does once the router runs.
    const gatedProbe = { check: { kind: 'command' as const, command: `[ "$DSTACK_NODE_GROUP_NODE_RANK" != 2 ] || [ -e ${gate} ]` }, interval_s: 0.3, timeout_s: 60 };
    const plan = servicePlan(name, {}, { hookLog: `${shared.dir}/quorum-hooks.log`, prefillNodes: 3, prefill: { ready: gatedProbe, ready_min: { kind: 'count', value: 2 } } });
    const handle = await startRun(name, plan);
    const routerUp = await waitForRunState(handle, (s) => s.jobs[0]?.status === 'RUNNING');
    const prefills = routerUp.jobs.filter((j) => j.group_name === 'prefill');
    expect(prefills.filter((j) => j.status === 'READY')).toHaveLength(2);
    expect(prefills.find((j) => j.group_job_index === 2)?.status).toBe('RUNNING');
    writeFileSync(gate, '');
    const all = await waitForRunState(handle, (s) => s.jobs.filter((j) => j.group_name === 'prefill').every((j) => j.status === 'READY'));
    const third = all.jobs.find((j) => j.group_name === 'prefill' && j.group_job_index === 2);
    expect(Date.parse(all.jobs[0]?.running_at ?? '')).toBeLessThan(Date.parse(third?.ready_at ?? ''));
    await handle.signal(stopRunSignal, { abort: false });
    await handle.result();
    await kill9(worker);
  }, 180_000);
});

describe('a long-lived run continues as new', () => {
  /** The run's executions, oldest first (continue-as-new makes one more each time). */
  async function executionsOf(name: string): Promise<Array<{ runId: string; status: string }>> {
    const found: Array<{ runId: string; status: string; start: number }> = [];
    for await (const info of env.client.workflow.list({ query: `WorkflowId = "${runWorkflowId(name)}"` })) {
      found.push({ runId: info.runId, status: info.status.name, start: info.startTime.getTime() });
    }
    return found.sort((a, b) => a.start - b.start).map(({ runId, status }) => ({ runId, status }));
  }

  /** Resolves once the run's latest execution is not `runId`: it has continued as new. */
  async function handedOver(handle: WorkflowHandle, runId: string): Promise<string> {
    return await waitFor('a hand-over', async () => {
      const latest = (await handle.describe()).runId;
      return latest !== runId ? latest : undefined;
    }, 60_000);
  }

  it('past continue_as_new_after_events: the groups are handed over with no process restarted; the next executions heal, resize and stop the run; kill -9 of the worker as one begins changes nothing', async () => {
    let worker = await startWorker();
    const hookLog = `${shared.dir}/handover-hooks.log`;
    const name = `heal-handover-${taskQueue}`;
    const decode = { nodes: 1, nodes_range: { min: 1, max: 2 }, on_failure: { action: 'restart-node' as const, max_restarts: 5, within_s: null } };
    const handle = await startRun(name, servicePlan(name, decode, { hookLog }), { continue_as_new_after_events: 100 });
    const before = await waitForRunState(handle, allUp);
    const pids = before.jobs.map((job) => serverPidIn(netnsOf(job)));

    // The PD run comes up in ~90 events; a restart passes 100, and the run hands over once it is quiet.
    process.kill(pids[2] ?? 0, 'SIGKILL');
    const secondRunId = await handedOver(handle, handle.firstExecutionRunId);
    const healed = await waitForRunState(handle, (s) => allUp(s) && s.jobs[2]?.attempt === 1);
    expect(healed.run_uid).toBe(handle.firstExecutionRunId);
    const decodePid = serverPidIn(netnsOf(healed.jobs[2]));
    await waitForLine(hookLog, (line) => line.endsWith(` ${ipOf(healed.jobs[2])}`));

    // A resize and another restart in the second execution; the worker killed as the third begins.
    // Through the client, as a user would: it asks again if the second execution is handing over just then.
    const up = await new TroupeClient(env.client, { taskQueue }).run(name).scaleGroup('decode', 2);
    expect(up).toMatchObject({ group: 'decode', nodes: 2, added: [3], removed: [] });
    await waitForLine(hookLog, (line) => line.split(' ')[1] === String(up.peers_version));
    const grown = await handle.query(runStateQuery);
    process.kill(serverPidIn(netnsOf(grown.jobs[3])), 'SIGKILL');
    await handedOver(handle, secondRunId);
    await kill9(worker);
    worker = await startWorker();
    const third = await waitForRunState(handle, (s) => allUp(s) && s.jobs[3]?.attempt === 1);
    // Every process that ran before a hand-over runs on, once: the router, prefill, decode/0's replacement.
    expect(third.jobs.slice(0, 3).map((job) => [job.attempt, job.pid])).toEqual(healed.jobs.map((job) => [job.attempt, job.pid]));
    expect(third.jobs.slice(0, 3).map((job) => serverPidIn(netnsOf(job)))).toEqual([pids[0], pids[1], decodePid]);
    await waitForLine(hookLog, (line) => (line.split(' ')[2]?.split(',') ?? []).includes(ipOf(third.jobs[3])));
    expect((await askRouter(ipOf(third.jobs[0]))).text).toBe('Hello, world');

    const executions = await executionsOf(name);
    expect(executions.length).toBeGreaterThanOrEqual(3);
    expect(executions.slice(0, -1).every((e) => e.status === 'CONTINUED_AS_NEW')).toBe(true);
    await expectStopped(handle);
    for (const job of third.jobs) expect(existsSync(`/run/netns/${netnsOf(job)}`)).toBe(false);
    expect(pids.slice(0, 2).some((pid) => pidAlive(pid))).toBe(false);
    await kill9(worker);
  }, 300_000);
});
