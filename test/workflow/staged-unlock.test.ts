import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { SimulatedBackend } from '../../src/backends/simulated/simulated-backend';
import { runWorkflowId } from '../../src/contract/ids';
import type { RunInputArg } from '../../src/contract/messages';
import { makePlan } from '../helpers/plans';
import { RecordingBackend, type ProvisionCall } from '../helpers/recording-backend';
import { testClient } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';

/** 3 groups of 3, 2 and 2 nodes: jobs 0-2, 3-4, 5-6 (the seed's layout). */
const layout = [
  { name: 'g0', nodes: 3 },
  { name: 'g1', nodes: 2 },
  { name: 'g2', nodes: 2 },
];

let client: Client;
let closeClient: () => Promise<void>;
beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
});
afterAll(async () => closeClient());

async function runWith(recording: RecordingBackend, name: string, extra: Partial<RunInputArg> = {}) {
  const worker = await startTroupeWorker({ recording });
  try {
    const plan = makePlan(name, layout);
    const input: RunInputArg = { plan, backend: 'recording', options: { retry_backoff_s: 1 }, ...extra };
    return await client.workflow.execute('RunWorkflow', {
      taskQueue: worker.taskQueue,
      workflowId: runWorkflowId(`${name}-${worker.taskQueue}`),
      args: [{ ...input, plan: { ...plan, run_name: `${name}-${worker.taskQueue}` } }],
    });
  } finally {
    await worker.stop();
  }
}

function callFor(calls: ProvisionCall[], jobNums: number[]): ProvisionCall {
  const found = calls.filter((c) => c.ok && c.job_nums.join() === jobNums.join());
  expect(found, `exactly one successful call for [${jobNums}]`).toHaveLength(1);
  return found[0] as ProvisionCall;
}

describe('staged unlock', () => {
  it('one job per call: job 0 first; then 1, 2, 3 and 5; 4 after 3, 6 after 5', async () => {
    const recording = new RecordingBackend(new SimulatedBackend(), { groupProvisioning: false, provisionDelayMs: 150 });
    const state = await runWith(recording, 'unlock-single');
    expect(state.status).toBe('DONE');
    const calls = recording.calls;
    expect(calls.map((c) => c.job_nums.join()).sort()).toEqual(['0', '1', '2', '3', '4', '5', '6']);
    const job0 = callFor(calls, [0]);
    expect(calls[0]).toBe(job0);
    for (const n of [1, 2, 3, 4, 5, 6]) expect(callFor(calls, [n]).started).toBeGreaterThanOrEqual(job0.ended);
    expect(callFor(calls, [4]).started).toBeGreaterThanOrEqual(callFor(calls, [3]).ended);
    expect(callFor(calls, [6]).started).toBeGreaterThanOrEqual(callFor(calls, [5]).ended);
    // 1, 2, 3 and 5 are unlocked together: they overlap rather than queue behind each other.
    const firstWave = [1, 2, 3, 5].map((n) => callFor(calls, [n]));
    const latestStart = Math.max(...firstWave.map((c) => c.started));
    const earliestEnd = Math.min(...firstWave.map((c) => c.ended));
    expect(latestStart).toBeLessThan(earliestEnd);
  });

  it('group provisioning: [0, 1, 2] in one call first, then [3, 4] and [5, 6] concurrently', async () => {
    const recording = new RecordingBackend(new SimulatedBackend(), { groupProvisioning: true, provisionDelayMs: 300 });
    const state = await runWith(recording, 'unlock-group');
    expect(state.status).toBe('DONE');
    const calls = recording.calls;
    expect(calls.map((c) => c.job_nums.join())).toHaveLength(3);
    const first = callFor(calls, [0, 1, 2]);
    expect(calls[0]).toBe(first);
    const g1 = callFor(calls, [3, 4]);
    const g2 = callFor(calls, [5, 6]);
    expect(g1.started).toBeGreaterThanOrEqual(first.ended);
    expect(g2.started).toBeGreaterThanOrEqual(first.ended);
    expect(Math.max(g1.started, g2.started)).toBeLessThan(Math.min(g1.ended, g2.ended));
  });

  it('a failed attempt of job 0 unlocks nothing', async () => {
    const recording = new RecordingBackend(new SimulatedBackend(), {
      groupProvisioning: false,
      noCapacityAttempts: { 0: 2 },
    });
    const state = await runWith(recording, 'unlock-retry', {
      options: { retry: { on_events: ['no-capacity'], duration_s: 120 }, retry_backoff_s: 1 },
    });
    expect(state.status).toBe('DONE');
    const calls = recording.calls;
    const job0Attempts = calls.filter((c) => c.job_nums.join() === '0');
    expect(job0Attempts.map((c) => c.ok)).toEqual([false, false, true]);
    const job0 = callFor(calls, [0]);
    for (const call of calls.filter((c) => c.job_nums.join() !== '0')) {
      expect(call.started).toBeGreaterThanOrEqual(job0.ended);
    }
  });

  it('job 0 without capacity and no retry fails the run and provisions nothing else', async () => {
    const recording = new RecordingBackend(new SimulatedBackend(), { groupProvisioning: false, noCapacityAttempts: { 0: 99 } });
    const state = await runWith(recording, 'unlock-nocap');
    expect(state.status).toBe('FAILED');
    expect(state.termination_reason).toBe('JOB_FAILED');
    expect(state.jobs[0]?.termination_reason).toBe('FAILED_TO_START_DUE_TO_NO_CAPACITY');
    expect(recording.calls.map((c) => c.job_nums.join())).toEqual(['0']);
  });
});
