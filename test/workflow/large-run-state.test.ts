import type { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeClient } from '../../src/client';
import { SimulatedBackend } from '../../src/backends/simulated/simulated-backend';
import { runWorkflowId } from '../../src/contract/ids';
import { runJobsQuery, runStateQuery } from '../../src/contract/messages';
import { JOBS_PAGE_MAX, type RunState } from '../../src/contract/run-state';
import { makePlan } from '../helpers/plans';
import { testClient } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';

/**
 * A run whose jobs would make its state larger than one payload may be (2 MB; 4,096 nodes failed
 * with TMPRL1103): the state query and the result come without the jobs, the `runJobs` query pages
 * them, and the SDK puts them back together, in order, while the run runs and after it has ended.
 */

const NODES_PER_GROUP = 600;

let client: Client;
let closeClient: () => Promise<void>;
beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
});
afterAll(async () => closeClient());

describe('a run too large for one answer', () => {
  it('answers without its jobs, pages them, and the SDK reads them all, running and ended', async () => {
    const worker = await startTroupeWorker({ simulated: new SimulatedBackend({ jobDurationMs: 4_000 }) });
    try {
      const name = `large-state-${worker.taskQueue.slice(-8)}`;
      const plan = makePlan(name, [
        { name: 'head', nodes: NODES_PER_GROUP },
        { name: 'workers', nodes: NODES_PER_GROUP },
      ]);
      const handle = await client.workflow.start('RunWorkflow', {
        taskQueue: worker.taskQueue,
        workflowId: runWorkflowId(name),
        args: [{ plan, backend: 'simulated', options: { watch_interval_ms: 200 } }],
      });
      const troupe = new TroupeClient(client, { taskQueue: worker.taskQueue });
      const run = troupe.run(name);

      // While it runs: the raw answer has no jobs; the SDK's has them all, in rank order.
      const deadline = Date.now() + 60_000;
      let live: RunState = await run.state();
      while (!live.jobs.every((j) => j.status === 'RUNNING')) {
        if (Date.now() > deadline) throw new Error(`jobs did not all run: ${live.status} ${live.message ?? ''}`);
        await new Promise((r) => setTimeout(r, 200));
        live = await run.state();
      }
      const raw = await handle.query(runStateQuery);
      expect(raw.jobs_paged).toBe(true);
      expect(raw.jobs).toEqual([]);
      expect(live.jobs_paged).toBe(false);
      expect(live.jobs.map((j) => j.job_num)).toEqual(Array.from({ length: 2 * NODES_PER_GROUP }, (_, i) => i));
      const page = await handle.query(runJobsQuery, { offset: 550, limit: 10_000 });
      expect(page).toHaveLength(JOBS_PAGE_MAX);
      expect(page[0]?.job_num).toBe(550);
      expect(page[0]?.group_name).toBe('head');
      expect(page[50]?.group_name).toBe('workers');

      // Ended: the result is paged the same way; wait() and state() give every job's end.
      const result = (await handle.result()) as RunState;
      expect(result.status).toBe('DONE');
      expect(result.jobs_paged).toBe(true);
      for (const ended of [await run.wait(), await run.state()]) {
        expect(ended.status).toBe('DONE');
        expect(ended.jobs).toHaveLength(2 * NODES_PER_GROUP);
        expect(ended.jobs.every((j) => j.status === 'DONE' && j.exit_code === 0)).toBe(true);
      }
    } finally {
      await worker.stop();
    }
  }, 180_000);
});
