import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CancelledFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { Backend, JobProcessState, JobRef } from '../../src/backends/backend';
import { whileHeartbeating } from '../../activities/heartbeat';
import { createJobBatchActivities } from '../../activities/job-batches';
import { activityClock, JobSupervisor } from '../../activities/job-supervisor';
import { fakeBackend as anyFakeBackend } from '../helpers/fake-backend';
import { instance } from '../helpers/run-core';

/**
 * The activity side of a batch, in the SDK's MockActivityEnvironment (no server): when it
 * heartbeats and with what, and what a cancellation does. Timers are vitest's fake ones.
 */

const NOW = Date.UTC(2026, 0, 1);
// A broken cancellation hangs: fail in seconds, not the suite's two minutes.
vi.setConfig({ testTimeout: 5_000 });

beforeEach(() => {
  vi.useFakeTimers();
  vi.setSystemTime(NOW);
});
afterEach(() => {
  vi.useRealTimers();
});

/** Job `n` of a one-submission run, on `host-n`. */
const ref = (n: number, attempt = 0): JobRef => ({ run_id: 'run-1', run_name: 'pd', submission: 0, job_num: n, job_name: `pd-${n}-0`, ...(attempt ? { attempt } : {}), instance: { ...instance(n), host: `host-${n}` } });

const notUsed = (): never => {
  throw new Error('not used by this test');
};

/** A backend whose runners answer `ready` and whose jobs are in `state`; everything else throws. */
function fakeBackend(ready: () => Promise<boolean>, state: () => Promise<JobProcessState> = notUsed): Backend {
  return anyFakeBackend({ runnerReady: ready, jobState: state });
}

/** Heartbeats the environment saw, with the fake time of each (ms from now). */
function heartbeatsOf(env: MockActivityEnvironment): Array<{ at: number; details: unknown }> {
  const seen: Array<{ at: number; details: unknown }> = [];
  const from = Date.now();
  env.on('heartbeat', (details: unknown) => seen.push({ at: Date.now() - from, details }));
  return seen;
}

const never = <T>() => new Promise<T>(() => undefined);

describe('whileHeartbeating', () => {
  const cases: Array<{ name: string; isLocal: boolean; details?: unknown; beats: Array<{ at: number; details: unknown }> }> = [
    { name: 'beats at once, then every 2 s, until the work ends', isLocal: false, beats: [0, 2_000, 4_000].map((at) => ({ at, details: undefined })) },
    { name: 'with details: every beat carries them', isLocal: false, details: { started_ms: 5 }, beats: [0, 2_000, 4_000].map((at) => ({ at, details: { started_ms: 5 } })) },
    { name: 'a local activity does not beat', isLocal: true, beats: [] },
  ];
  it.each(cases)('$name', async ({ isLocal, details, beats }) => {
    const env = new MockActivityEnvironment({ isLocal });
    const seen = heartbeatsOf(env);
    const done = env.run(() => whileHeartbeating(() => new Promise<string>((resolve) => setTimeout(() => resolve('done'), 5_000)), { details }));
    await vi.advanceTimersByTimeAsync(10_000);
    await expect(done).resolves.toBe('done');
    expect(seen).toEqual(beats);
  });

  it('a cancellation ends it at once, though the work hangs; the beats stop', async () => {
    const env = new MockActivityEnvironment();
    const seen = heartbeatsOf(env);
    const done = env.run(() => whileHeartbeating(never));
    done.catch(() => undefined);
    await vi.advanceTimersByTimeAsync(3_000);
    env.cancel();
    await expect(done).rejects.toBeInstanceOf(CancelledFailure);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(seen.map(({ at }) => at)).toEqual([0, 2_000]);
  });
});

describe('waitRunnersReady', () => {
  type Wait = ReturnType<typeof createJobBatchActivities>['waitRunnersReady'];
  const run = (env: MockActivityEnvironment, backend: Backend, timeout_s: number) =>
    env.run<Parameters<Wait>, Awaited<ReturnType<Wait>>, Wait>(createJobBatchActivities({ fake: backend }).waitRunnersReady, { backend: 'fake', jobs: [ref(0), ref(1)], timeout_s });

  it('heartbeats when its first attempt began, and keeps that time across retries', async () => {
    const cases: Array<[string, unknown, number]> = [
      ['a first attempt', undefined, Date.now()],
      ['a retry', { started_ms: NOW - 60_000 }, NOW - 60_000],
    ];
    for (const [name, heartbeatDetails, startedMs] of cases) {
      const env = new MockActivityEnvironment({ heartbeatDetails });
      const seen = heartbeatsOf(env);
      const done = run(env, fakeBackend(never), 3_600);
      done.catch(() => undefined);
      await vi.advanceTimersByTimeAsync(2_000);
      expect(seen, name).toEqual([
        { at: 0, details: { started_ms: startedMs } },
        { at: 2_000, details: { started_ms: startedMs } },
      ]);
      env.cancel();
      await expect(done).rejects.toBeInstanceOf(CancelledFailure);
    }
  });

  it('the deadline counts from the first attempt: a retry past it fails the runners at once', async () => {
    const env = new MockActivityEnvironment({ heartbeatDetails: { started_ms: NOW - 60_000 } });
    const done = run(env, fakeBackend(async () => false), 30);
    await vi.advanceTimersByTimeAsync(0);
    const { failed } = await done;
    expect(failed.map((f) => [f.job_num, f.type])).toEqual([
      [0, 'RunnerNotReady'],
      [1, 'RunnerNotReady'],
    ]);
  });

  it('a cancellation while runners are asked ends it with a CancelledFailure, and the beats stop', async () => {
    const env = new MockActivityEnvironment();
    const seen = heartbeatsOf(env);
    const done = run(env, fakeBackend(async () => false), 3_600);
    done.catch(() => undefined);
    await vi.advanceTimersByTimeAsync(1_000);
    env.cancel();
    await expect(done).rejects.toBeInstanceOf(CancelledFailure);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(seen.map(({ at }) => at)).toEqual([0]);
  });
});

describe('JobSupervisor on the activity clock', () => {
  const cases: Array<{ name: string; state: () => Promise<JobProcessState> }> = [
    { name: 'between two rounds', state: async () => ({ state: 'running', pid: 7 }) },
    { name: 'while the backend hangs', state: never },
  ];
  it.each(cases)('a cancellation $name rejects with a CancelledFailure and sends nothing', async ({ state }) => {
    const env = new MockActivityEnvironment();
    const sent: unknown[] = [];
    const supervise = () =>
      new JobSupervisor({
        target: fakeBackend(never, state),
        input: { jobs: [], probe: null, interval_ms: 1_000 },
        refs: [ref(0)],
        startedMs: NOW,
        send: async (events) => sent.push(events) > 0,
        clock: activityClock(env.context),
      }).run();
    const done = env.run(supervise);
    done.catch(() => undefined);
    await vi.advanceTimersByTimeAsync(2_500);
    env.cancel();
    await expect(done).rejects.toBeInstanceOf(CancelledFailure);
    expect(sent).toEqual([]);
  });
});
