import { readdirSync } from 'node:fs';
import type { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Plan } from '../../src/plan/plan-schema';
import { runWorkflowId } from '../../src/contract/ids';
import { runStateQuery, stopRunSignal, type RunOptionsInput } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { makeLocalFleet, makeSharedDir, pidAlive, processGroupMembers } from '../helpers/local-fleet';
import { makePlan, type GroupSketch } from '../helpers/plans';
import { RecordingBackend } from '../helpers/recording-backend';
import { testClient } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';

/** Runs on the local fleet with real processes: order, stop criteria, failure, retry, stop. */

const fleet = makeLocalFleet();
const shared = makeSharedDir();
let client: Client;
let closeClient: () => Promise<void>;
let worker: Awaited<ReturnType<typeof startTroupeWorker>>;
let recording: RecordingBackend;

beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
  recording = new RecordingBackend(fleet.backend);
  worker = await startTroupeWorker({ local: fleet.backend, recording, 'never-ready': new RecordingBackend(fleet.backend, { runnerNeverReady: true }),
    'hangs-job-1': new RecordingBackend(fleet.backend, { provisionHangs: [1] }),
  });
});
afterAll(async () => {
  await worker?.stop();
  await closeClient?.();
  fleet.remove();
  shared.remove();
});

let counter = 0;
function startRun(groups: GroupSketch[], overrides: Partial<Plan> = {}, options: RunOptionsInput = {}, backend = 'local') {
  const name = `local-${++counter}-${worker.taskQueue}`;
  const plan = makePlan(name, groups, overrides);
  return client.workflow.start('RunWorkflow', {
    taskQueue: worker.taskQueue,
    workflowId: runWorkflowId(name),
    args: [{ plan, backend, options: { stop_grace_s: 2, retry_backoff_s: 1, ...options } }],
  });
}

async function runToEnd(...args: Parameters<typeof startRun>): Promise<RunState> {
  const handle = await startRun(...args);
  return (await handle.result()) as RunState;
}

/** Appends "<rank> <ns since epoch>" to a shared file as the job's first action. */
const recordStart = (file: string) => `echo "$DSTACK_NODE_RANK $(date +%s%N)" >> ${shared.dir}/${file}`;

function startTimes(file: string): Map<number, bigint> {
  return new Map(shared.lines(file).map((line) => {
    const [rank, ns] = line.split(' ');
    return [Number(rank), BigInt(ns ?? '0')];
  }));
}

function expectNoJobProcess(state: RunState) {
  for (const job of state.jobs) {
    if (job.pid !== null) expect(processGroupMembers(job.pid), `processes of job ${job.job_num}`).toEqual([]);
  }
}

describe('runs on the local fleet', () => {
  it('workers-first: the master starts after every worker is running', async () => {
    const cmd = [recordStart('wf')];
    const state = await runToEnd(
      [{ name: 'router', nodes: 1, commands: cmd }, { name: 'prefill', nodes: 2, commands: cmd }, { name: 'decode', nodes: 1, commands: cmd }],
      { startup_order: 'workers-first' },
    );
    expect(state.status).toBe('DONE');
    const times = startTimes('wf');
    expect([...times.keys()].sort()).toEqual([0, 1, 2, 3]);
    for (const n of [1, 2, 3]) expect(times.get(0)! > times.get(n)!).toBe(true);
    const running = state.jobs.map((j) => Date.parse(j.running_at ?? ''));
    for (const n of [1, 2, 3]) expect(running[0]).toBeGreaterThanOrEqual(running[n]!);
  });

  it('master-first: every worker starts after the master is running', async () => {
    const cmd = [recordStart('mf')];
    const state = await runToEnd(
      [{ name: 'head', nodes: 1, commands: cmd }, { name: 'actors', nodes: 3, commands: cmd }],
      { startup_order: 'master-first' },
    );
    expect(state.status).toBe('DONE');
    const times = startTimes('mf');
    for (const n of [1, 2, 3]) expect(times.get(n)! > times.get(0)!).toBe(true);
  });

  it('all-done waits for every job; each gets its peers and its env', async () => {
    const state = await runToEnd([
      { name: 'a', nodes: 1, commands: [`echo "$DSTACK_NODE_RANK $DSTACK_NODE_GROUP_NAME ${'${{ groups[1].nodes[0].IP_ADDRESS }}'} $DSTACK_NODES_NUM" >> ${shared.dir}/env`] },
      { name: 'b', nodes: 1, commands: [`sleep 1; echo "$DSTACK_NODE_RANK $DSTACK_NODE_GROUP_NAME $DSTACK_MASTER_NODE_IP $DSTACK_NODES_NUM" >> ${shared.dir}/env`] },
    ]);
    expect(state.status).toBe('DONE');
    expect(state.termination_reason).toBe('ALL_JOBS_DONE');
    expect(state.jobs.map((j) => j.status)).toEqual(['DONE', 'DONE']);
    const [ip0, ip1] = state.jobs.map((j) => j.instance?.internal_ip);
    expect(shared.lines('env').sort()).toEqual([`0 a ${ip1} 2`, `1 b ${ip0} 2`]);
  });

  it('master-done ends the run when job 0 is done and stops the others', async () => {
    const state = await runToEnd(
      [{ name: 'master', nodes: 1, commands: ['sleep 0.5'] }, { name: 'workers', nodes: 2, commands: ['sleep 300 & sleep 300; wait'] }],
      { stop_criteria: 'master-done' },
    );
    expect(state.status).toBe('DONE');
    expect(state.jobs[0]?.status).toBe('DONE');
    expect(state.jobs.slice(1).map((j) => [j.status, j.termination_reason])).toEqual([
      ['TERMINATED', 'TERMINATED_BY_SERVER'],
      ['TERMINATED', 'TERMINATED_BY_SERVER'],
    ]);
    expectNoJobProcess(state);
  });

  it('a failed job fails the run (JOB_FAILED) and every other process is torn down', async () => {
    const state = await runToEnd([
      { name: 'ok', nodes: 2, commands: ['sleep 300 & sleep 300; wait'] },
      { name: 'bad', nodes: 1, commands: ['sleep 0.5', 'echo failing; exit 3'] },
    ]);
    expect(state.status).toBe('FAILED');
    expect(state.termination_reason).toBe('JOB_FAILED');
    expect(state.jobs[2]).toMatchObject({ status: 'FAILED', termination_reason: 'CONTAINER_EXITED_WITH_ERROR', exit_code: 3 });
    expect(state.message).toContain('job 2 (bad/0)');
    expect(state.jobs.slice(0, 2).map((j) => j.termination_reason)).toEqual(['TERMINATED_BY_SERVER', 'TERMINATED_BY_SERVER']);
    for (const job of state.jobs) expect(job.pid !== null && pidAlive(job.pid)).toBe(false);
    expectNoJobProcess(state);
  });

  it('retry on error resubmits the whole run until it succeeds', async () => {
    const marker = `${shared.dir}/retry-marker`;
    const state = await runToEnd(
      [{ name: 'g', nodes: 2, commands: [`if [ "$DSTACK_NODE_RANK" = 1 ] && [ ! -e ${marker} ]; then touch ${marker}; exit 1; fi`, 'echo attempt-ok'] }],
      { retry: { on_events: ['error'], duration_s: 120 } },
    );
    expect(state.status).toBe('DONE');
    expect(state.submission).toBe(1);
  });

  it('retry gives up when its duration runs out: RETRY_LIMIT_EXCEEDED', async () => {
    const state = await runToEnd(
      // One file per attempt: each submission runs as a user of its own (as root), which may not append to another's file.
      [{ name: 'g', nodes: 1, commands: [`mktemp ${shared.dir}/always-fail.XXXXXX; exit 1`] }],
      { retry: { on_events: ['error'], duration_s: 4 } },
    );
    expect(state.status).toBe('FAILED');
    expect(state.termination_reason).toBe('RETRY_LIMIT_EXCEEDED');
    expect(state.submission).toBeGreaterThanOrEqual(1);
    expect(readdirSync(shared.dir).filter((f) => f.startsWith('always-fail.')).length).toBe(state.submission + 1);
  });

  it('a runner that never becomes ready fails the job: WAITING_RUNNER_LIMIT_EXCEEDED', async () => {
    const state = await runToEnd([{ name: 'g', nodes: 1 }], {}, { runner_ready_timeout_s: 2 }, 'never-ready');
    expect(state.status).toBe('FAILED');
    expect(state.jobs[0]?.termination_reason).toBe('WAITING_RUNNER_LIMIT_EXCEEDED');
  });

  it('a job whose address never comes fails the run after the deadline, naming job and group', async () => {
    const state = await runToEnd(
      [{ name: 'head', nodes: 1, commands: ['sleep 300'] }, { name: 'workers', nodes: 1 }],
      {},
      { address_deadline_s: 2, provision_attempt_timeout_s: 1 },
      'hangs-job-1',
    );
    expect(state.status).toBe('FAILED');
    expect(state.jobs[1]).toMatchObject({ status: 'FAILED', termination_reason: 'WAITING_ADDRESSES_LIMIT_EXCEEDED' });
    expect(state.message).toMatch(/no address after \d+s for workers\/0 \(job 1\)/);
    expect(state.jobs[0]?.termination_reason).toBe('TERMINATED_BY_SERVER');
  });

  for (const abort of [false, true]) {
    it(`stop by the user (${abort ? 'abort' : 'graceful'}) tears every process down`, async () => {
      const handle = await startRun([{ name: 'g', nodes: 2, commands: ['sleep 300 & sleep 300; wait'] }]);
      await waitFor(async () => (await handle.query(runStateQuery)).jobs.every((j) => j.status === 'RUNNING'));
      await handle.signal(stopRunSignal, { abort });
      const state = (await handle.result()) as RunState;
      expect(state.status).toBe('TERMINATED');
      expect(state.termination_reason).toBe(abort ? 'ABORTED_BY_USER' : 'STOPPED_BY_USER');
      expect(state.jobs.map((j) => j.termination_reason)).toEqual(abort ? ['ABORTED_BY_USER', 'ABORTED_BY_USER'] : ['TERMINATED_BY_USER', 'TERMINATED_BY_USER']);
      expectNoJobProcess(state);
    });
  }
});

async function waitFor(check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 100));
  }
}
