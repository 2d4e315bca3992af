import type { ChildProcess } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { runWorkflowId } from '../../src/contract/ids';
import { runStateQuery } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { processGroupMembers } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { kill9, startWorkerProcess, useWorkerProcesses } from '../helpers/worker-process-control';

/** Two worker processes on one task queue; one is killed mid-run; the other finishes the run. */

const env = useWorkerProcesses('scale-out');
const { fleet, shared, taskQueue, workers } = env;

async function startWorker(): Promise<ChildProcess> {
  const child = await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir });
  workers.push(child);
  return child;
}

describe('scale-out', () => {
  it('a run survives the loss of one of two workers', async () => {
    const [first, second] = await Promise.all([startWorker(), startWorker()]);
    const name = `scale-out-${taskQueue}`;
    const record = `echo "$DSTACK_NODE_RANK" >> ${shared.dir}/starts`;
    const plan = makePlan(name, [
      { name: 'router', nodes: 1, commands: [record, 'sleep 5'] },
      { name: 'prefill', nodes: 2, commands: [record, 'sleep 5'] },
      { name: 'decode', nodes: 2, commands: [record, 'sleep 5'] },
    ]);
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan, backend: 'local', options: {} }] });
    const deadline = Date.now() + 60_000;
    while (!(await handle.query(runStateQuery)).jobs.every((j) => j.status === 'RUNNING')) {
      if (Date.now() > deadline) throw new Error('jobs did not start');
      await new Promise((r) => setTimeout(r, 100));
    }
    const victim = Math.random() < 0.5 ? first : second;
    const survivor = victim === first ? second : first;
    if (victim) await kill9(victim);

    const state = (await handle.result()) as RunState;
    expect(state.status).toBe('DONE');
    expect(shared.lines('starts').map(Number).sort()).toEqual([0, 1, 2, 3, 4]);
    for (const job of state.jobs) if (job.pid !== null) expect(processGroupMembers(job.pid)).toEqual([]);
    expect(survivor?.exitCode).toBeNull();
    survivor?.kill('SIGTERM');
    await new Promise((r) => survivor?.once('exit', r));
  }, 180_000);
});
