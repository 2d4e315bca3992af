import type { ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { runWorkflowId } from '../../src/contract/ids';
import { runStateQuery, stopRunSignal } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { expectNothingLeft, jobDirsOf, sshServersUnder } from '../helpers/inter-node-ssh';
import { makePlan } from '../helpers/plans';
import { kill9, startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/** kill -9 of the worker while a run's nodes hold their inter-node SSH servers: the next worker's teardown leaves nothing. */

const env = useWorkerProcesses('mpi-crash');
const { fleet, shared, taskQueue, workers } = env;
const name = `mpi-crash-${taskQueue}`;

async function startWorker(): Promise<ChildProcess> {
  const child = await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir });
  workers.push(child);
  return child;
}

// Before the fleet is removed (hooks run in reverse): a run a failed test left going is stopped by a worker of its own.
afterAll(async () => {
  const handle = env.client.workflow.getHandle(runWorkflowId(name));
  const state = (await handle.query(runStateQuery).catch(() => null)) as RunState | null;
  if (!state || ['DONE', 'FAILED', 'TERMINATED'].includes(state.status)) return;
  const worker = await startWorker();
  await handle.signal(stopRunSignal, { abort: false }).catch(() => undefined);
  await handle.result().catch(() => undefined);
  await kill9(worker);
});

describe('inter-node SSH and a worker crash', () => {
  it('kill -9 of the worker mid-run: the servers keep serving, and after the next worker\'s teardown nothing is left', async () => {
    let worker = await startWorker();
    const go = `${shared.dir}/go`;
    const plan = makePlan(name, [
      // The master logs in to its peer once before and once after the crash.
      { name: 'head', nodes: 1, commands: [
        'peer=$(sed -n 2p <<< "$DSTACK_NODES_IPS")',
        'ssh "$peer" \'echo "before: $DSTACK_NODE_RANK"\'',
        `while [ ! -e ${go} ]; do sleep 0.1; done`,
        'ssh "$peer" \'echo "after: $DSTACK_NODE_RANK"\'',
      ] },
      { name: 'peer', nodes: 1, commands: ['sleep infinity'] },
    ], { startup_order: 'workers-first', stop_criteria: 'master-done' });
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }] });
    const running = await waitForRunState(handle, (s) => s.jobs.every((j) => j.status === 'RUNNING'));
    const dirs = jobDirsOf(running);
    // The master's first login has a session process of its own (sshd re-executes itself per
    // connection, with the same arguments): count the servers once that login is over.
    const servers = async (): Promise<number[]> => {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const found = sshServersUnder(dirs);
        const loggedIn = existsSync(`${dirs[0]}/log`) && readFileSync(`${dirs[0]}/log`, 'utf8').includes('before: 1');
        if ((loggedIn && found.length === 2) || Date.now() > deadline) return found;
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    expect(await servers()).toHaveLength(2);

    await kill9(worker);
    expect(sshServersUnder(dirs)).toHaveLength(2);
    worker = await startWorker();
    writeFileSync(go, '');
    const state = (await handle.result()) as RunState;
    expect(state.status).toBe('DONE');
    const log = readFileSync(`${dirs[0]}/log`, 'utf8');
    expect(log).toBe('before: 1\nafter: 1\n');
    await expectNothingLeft(state);
    worker.kill('SIGTERM');
    await new Promise((r) => worker.once('exit', r));
  }, 180_000);
});
