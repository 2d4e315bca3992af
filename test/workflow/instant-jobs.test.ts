import type { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedBackend } from '../../src/backends/simulated/simulated-backend';
import { runWorkflowId } from '../../src/contract/ids';
import type { RunState } from '../../src/contract/run-state';
import { makePlan } from '../helpers/plans';
import { testClient } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';

/**
 * Jobs that end the moment they start: their `running` and `exited` reach the run while it is
 * still delivering the previous mayStart signals. Each run must still start its next jobs (the
 * router of workers-first after its workers; the workers of master-first after job 0) and end.
 * Many runs at once make that overlap happen (20 of 100 runs hung before this was fixed).
 */

let client: Client;
let closeClient: () => Promise<void>;
beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
});
afterAll(async () => closeClient());

describe('jobs that end as soon as they start', () => {
  it('every run of many at once starts all its jobs in the order asked and ends DONE', async () => {
    const worker = await startTroupeWorker({ simulated: new SimulatedBackend({ jobDurationMs: 0, groupProvisioning: true }) });
    try {
      const orders = ['workers-first', 'master-first'] as const;
      const handles = await Promise.all(
        Array.from({ length: 24 }, async (_, i) => {
          const name = `instant-${i}-${worker.taskQueue.slice(-8)}`;
          const plan = makePlan(name, [{ name: 'router', nodes: 1 }, { name: 'prefill', nodes: 1 }, { name: 'decode', nodes: 1 }], {
            startup_order: orders[i % 2],
          });
          return await client.workflow.start('RunWorkflow', {
            taskQueue: worker.taskQueue,
            workflowId: runWorkflowId(name),
            args: [{ plan, backend: 'simulated', options: { watch_interval_ms: 50 } }],
          });
        }),
      );
      const deadline = new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 60_000));
      const states = await Promise.all(handles.map((h) => Promise.race([h.result() as Promise<RunState>, deadline])));
      const hung = states.flatMap((s, i) => (s === 'hung' ? [handles[i]?.workflowId] : []));
      for (const h of handles) await h.terminate('test over').catch(() => undefined);
      expect(hung, 'runs that never ended').toEqual([]);
      for (const state of states as RunState[]) {
        expect(state.status, state.message ?? '').toBe('DONE');
        expect(state.jobs.map((j) => j.exit_code)).toEqual([0, 0, 0]);
      }
    } finally {
      await worker.stop();
    }
  }, 120_000);
});
