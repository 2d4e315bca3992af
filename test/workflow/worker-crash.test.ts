import type { ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runWorkflowId } from '../../src/contract/ids';
import type { RunState } from '../../src/contract/run-state';
import { processGroupMembers } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { kill9, startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/** kill -9 of the worker mid-provisioning and mid-run: the run finishes, each job started once. */

const env = useWorkerProcesses('crash');
const { fleet, shared, taskQueue, workers } = env;

async function startWorker(): Promise<ChildProcess> {
  const child = await startWorkerProcess({
    taskQueue,
    localStateDir: fleet.stateDir,
    env: { TEST_PROVISION_DELAY_MS: '1500', TEST_ONE_JOB_PER_CALL: '1' },
  });
  workers.push(child);
  return child;
}

describe('worker crash', () => {
  it('kill -9 during provisioning and during the run: the run finishes, every job started exactly once', async () => {
    let worker = await startWorker();
    const name = `crash-${taskQueue}`;
    const plan = makePlan(name, [
      { name: 'router', nodes: 1, commands: [`echo "$DSTACK_NODE_RANK" >> ${shared.dir}/starts`, 'sleep 6'] },
      { name: 'prefill', nodes: 2, commands: [`echo "$DSTACK_NODE_RANK" >> ${shared.dir}/starts`, 'sleep 6'] },
      { name: 'decode', nodes: 2, commands: [`echo "$DSTACK_NODE_RANK" >> ${shared.dir}/starts`, 'sleep 6'] },
    ], { startup_order: 'workers-first' });
    const handle = await env.client.workflow.start('RunWorkflow', {
      taskQueue,
      workflowId: runWorkflowId(name),
      args: [{ plan, backend: 'local', options: {} }],
    });

    // Mid-provisioning: job 0 has its machine, the others are still being provisioned.
    const provisioning = await waitForRunState(handle, (s) => s.jobs[0]?.instance !== null);
    expect(provisioning.jobs.some((j) => j.instance === null)).toBe(true);
    await kill9(worker);
    worker = await startWorker();

    // Mid-run: every job is running.
    await waitForRunState(handle, (s) => s.jobs.every((j) => j.status === 'RUNNING'));
    await kill9(worker);
    worker = await startWorker();

    const state = (await handle.result()) as RunState;
    expect(state.status).toBe('DONE');
    expect(shared.lines('starts').map(Number).sort()).toEqual([0, 1, 2, 3, 4]);
    for (const job of state.jobs) if (job.pid !== null) expect(processGroupMembers(job.pid)).toEqual([]);
    worker.kill('SIGTERM');
    await new Promise((r) => worker.once('exit', r));
  }, 240_000);

  it('kill -9 while a group waits on readiness: the new worker resumes the wait and the run finishes', async () => {
    let worker = await startWorker();
    const name = `crash-ready-${taskQueue}`;
    const base = makePlan(name, [
      { name: 'router', nodes: 1, commands: [`echo router >> ${shared.dir}/ready-starts`] },
      { name: 'prefill', nodes: 1, commands: [`echo prefill >> ${shared.dir}/ready-starts`, 'sleep 300'] },
    ], { stop_criteria: 'master-done' });
    const plan = {
      ...base,
      groups: base.groups.map((g) =>
        g.name === 'router'
          ? { ...g, depends_on: [1] }
          : { ...g, ready: { check: { kind: 'command' as const, command: `test -e ${shared.dir}/warm` }, interval_s: 0.2, timeout_s: 120 } },
      ),
    };
    const handle = await env.client.workflow.start('RunWorkflow', {
      taskQueue,
      workflowId: runWorkflowId(name),
      args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }],
    });
    await waitForRunState(handle, (s) => s.jobs[1]?.status === 'RUNNING' && s.groups[0]?.waiting_for !== null);
    await kill9(worker);
    worker = await startWorker();
    writeFileSync(`${shared.dir}/warm`, '');
    const state = (await handle.result()) as RunState;
    expect(state.status).toBe('DONE');
    expect(state.jobs[1]?.ready_at).not.toBeNull();
    expect(shared.lines('ready-starts').sort()).toEqual(['prefill', 'router']);
    for (const job of state.jobs) if (job.pid !== null) expect(processGroupMembers(job.pid)).toEqual([]);
    worker.kill('SIGTERM');
    await new Promise((r) => worker.once('exit', r));
  }, 240_000);
});
