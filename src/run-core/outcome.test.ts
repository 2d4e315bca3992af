import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Plan } from '../plan/plan-schema';
import type { JobEvent } from '../contract/message-schemas';
import { makePlan } from '../../test/helpers/plans';
import { coreOf, endingOf, exited, instance, jobs, pass, provisioned, running, started, T0 } from '../../test/helpers/run-core';
import type { Ending } from './ending';
import type { RunEvent } from './events';
import { decideAfterTeardown, decideOutcome, nextDeadline, resubmit, teardownOf } from './outcome';

/**
 * The outcome policy over sequences of events, no server: what ends a submission and how, the
 * deadlines, and what comes after teardown. Each case feeds events as the run's loop does: the
 * events of a pass, then a `tick`.
 */

const pd = makePlan('pd', [{ name: 'router', nodes: 1 }, { name: 'prefill', nodes: 2 }, { name: 'decode', nodes: 1 }]);

describe('what ends a submission', () => {
  it('a first running job makes the run RUNNING, once', () => {
    let core = coreOf(pd);
    core = pass(core, [jobs(core, [0, 1, 2, 3].map((n) => provisioned(n))), { kind: 'unlocked' }, { kind: 'announced' }], T0).core;
    const first = pass(core, [jobs(core, [running(0)])], T0 + 10);
    expect(first.effects).toEqual([{ kind: 'set-status', status: 'RUNNING' }]);
    expect(first.core.submission.running_since_ms).toBe(T0 + 10);
    expect(pass(first.core, [jobs(first.core, [running(1)])], T0 + 20).effects).toEqual([]);
  });

  it.each<{ name: string; plan: Plan; exits: Array<[number, number]>; ending: Ending | undefined }>([
    { name: 'all-done: every node done', plan: pd, exits: [[0, 0], [1, 0], [2, 0], [3, 0]], ending: { kind: 'done' } },
    { name: 'all-done: one node still running', plan: pd, exits: [[0, 0], [1, 0], [2, 0]], ending: undefined },
    { name: 'master-done: job 0 done', plan: { ...pd, stop_criteria: 'master-done' }, exits: [[0, 0]], ending: { kind: 'done' } },
    { name: 'master-done: another node done', plan: { ...pd, stop_criteria: 'master-done' }, exits: [[3, 0]], ending: undefined },
    { name: 'group-done: prefill done', plan: { ...pd, stop_criteria: 'group-done', stop_group: 1 }, exits: [[1, 0], [2, 0]], ending: { kind: 'done' } },
    { name: 'group-done: half of prefill', plan: { ...pd, stop_criteria: 'group-done', stop_group: 1 }, exits: [[1, 0]], ending: undefined },
    {
      name: 'a node exits with an error: the run fails, as an error',
      plan: pd,
      exits: [[2, 3]],
      ending: { kind: 'failed', job_num: 2, retry_event: 'error', message: 'job 2 (prefill/1) on local failed: CONTAINER_EXITED_WITH_ERROR: exited with code 3' },
    },
  ])('$name', ({ plan, exits, ending }) => {
    const core = started(plan);
    const { effects } = pass(core, [jobs(core, exits.map(([n, code]) => exited(n, code)))], T0 + 3000);
    expect(endingOf(effects)).toEqual(ending);
  });

  it("a node killed for a reason its backend names (an OOM kill) fails with that reason and its code", () => {
    const core = started(makePlan('pd', [{ name: 'router', nodes: 1 }, { name: 'prefill', nodes: 2 }]));
    const { core: next, effects } = pass(core, [jobs(core, [{ kind: 'exited', job_num: 1, exit_code: 137, reason: 'out of memory: limit 1 GiB' }])], T0 + 3000);
    expect(next.run.jobs[1]).toMatchObject({ status: 'FAILED', termination_reason: 'CONTAINER_EXITED_WITH_ERROR', exit_code: 137, message: 'out of memory: limit 1 GiB (exit code 137)' });
    expect(endingOf(effects)).toMatchObject({ kind: 'failed', job_num: 1, retry_event: 'error' });
  });

  it('a failure counts as the retry event its report names', () => {
    const core = started(pd);
    const failed: JobEvent = { kind: 'failed', job_num: 1, reason: 'INSTANCE_UNREACHABLE', message: 'gone', retry_event: 'interruption' };
    expect(endingOf(pass(core, [jobs(core, [failed])], T0 + 3000).effects)).toMatchObject({ kind: 'failed', job_num: 1, retry_event: 'interruption' });
  });

  it('a stop ends it, an abort once asked stays an abort', () => {
    const core = started(pd);
    const { core: after, effects } = pass(core, [{ kind: 'stop', abort: true }, { kind: 'stop', abort: false }], T0 + 3000);
    expect(endingOf(effects)).toEqual({ kind: 'stopped', abort: true });
    expect(after.stop_request).toEqual({ abort: true });
  });

  it('a stop ends a submission before its groups are even unlocked', () => {
    const core = coreOf(pd);
    expect(endingOf(pass(core, [{ kind: 'stop', abort: false }], T0).effects)).toEqual({ kind: 'stopped', abort: false });
  });

  it('a group that failed on its own fails it; the first failure is the message', () => {
    const core = started(pd);
    const { effects } = pass(core, [
      { kind: 'group-failed', submission: 0, message: 'group decode: boom' },
      { kind: 'group-failed', submission: 0, message: 'group prefill: later' },
    ], T0 + 3000);
    expect(endingOf(effects)).toEqual({ kind: 'failed', job_num: null, retry_event: null, message: 'group decode: boom' });
  });

  it('events of another submission change nothing', () => {
    const core = started(pd);
    const { core: after, effects } = pass(core, [
      { kind: 'jobs', submission: 1, events: [exited(0, 1)] },
      { kind: 'group-failed', submission: 7, message: 'late' },
    ], T0 + 3000);
    expect(effects).toEqual([]);
    expect(after.run.jobs[0]?.status).toBe('RUNNING');
  });

  it('a group others depend on that ends before it is ready fails the run', () => {
    const plan = makePlan('dep', [{ name: 'router', nodes: 1 }, { name: 'workers', nodes: 1 }]);
    plan.groups[0]!.depends_on = [1];
    plan.groups[1]!.ready = { check: { kind: 'tcp', port: 8000 }, interval_s: 1, timeout_s: 60 };
    let core = coreOf(plan);
    core = pass(core, [jobs(core, [provisioned(0), provisioned(1)]), { kind: 'unlocked' }, { kind: 'announced' }], T0).core;
    const { effects } = pass(core, [jobs(core, [running(1), exited(1, 0)])], T0 + 100);
    expect(endingOf(effects)).toEqual({ kind: 'failed', job_num: 1, retry_event: 'error', message: 'workers/0 exited before it was ready' });
  });

  it('the stop criteria wait for the start-up: nothing is done before the book went out', () => {
    const core = coreOf(pd);
    expect(pass(core, [jobs(core, [provisioned(0)])], T0).effects).toEqual([]);
  });

  it('a machine provisioned for an attempt that was replaced is given back', () => {
    const core = started(pd);
    core.run.jobs[1]!.attempt = 1;
    const { effects } = pass(core, [jobs(core, [provisioned(1, 0)])], T0 + 3000);
    expect(effects).toEqual([{ kind: 'give-back', job_num: 1, attempt: 0, instance: instance(1) }]);
  });
});

describe('deadlines', () => {
  it('every job must have its address within the deadline after the unlock; those without fail the submission', () => {
    let core = coreOf(pd, { address_deadline_s: 30 });
    core = pass(core, [jobs(core, [provisioned(0), provisioned(1)]), { kind: 'unlocked' }], T0).core;
    expect(nextDeadline(core)).toBe(T0 + 60_000); // the provisioning attempt's limit (60 s) is the longer
    expect(pass(core, [], T0 + 59_999).effects).toEqual([]);
    const late = pass(core, [], T0 + 60_000);
    expect(endingOf(late.effects)).toEqual({
      kind: 'failed',
      job_num: 2,
      retry_event: 'error',
      message: 'no address after 60s for prefill/1 (job 2), decode/0 (job 3)',
    });
    expect(late.core.run.jobs.map((j) => j.termination_reason)).toEqual([null, null, 'WAITING_ADDRESSES_LIMIT_EXCEEDED', 'WAITING_ADDRESSES_LIMIT_EXCEEDED']);
  });

  it('while no capacity is retried, addresses may come until the retry duration ends', () => {
    let core = coreOf(pd, { retry: { on_events: ['no-capacity'], duration_s: 3600 } });
    core = pass(core, [jobs(core, [provisioned(0)]), { kind: 'unlocked' }], T0 + 1000).core;
    expect(nextDeadline(core)).toBe(T0 + 3600_000 + 60_000);
  });

  it('max_duration counts from the first running job; at its end open jobs end, the submission fails', () => {
    const core = started({ ...pd, max_duration_s: 10 });
    expect(nextDeadline(core)).toBe(T0 + 2000 + 10_000);
    expect(pass(core, [], T0 + 11_999).effects).toEqual([]);
    const { core: after, effects } = pass(core, [jobs(core, [exited(3, 0)])], T0 + 12_000);
    expect(endingOf(effects)).toEqual({ kind: 'failed', job_num: null, retry_event: null, message: 'max_duration of 10s exceeded' });
    expect(after.run.jobs.map((j) => j.termination_reason)).toEqual(['MAX_DURATION_EXCEEDED', 'MAX_DURATION_EXCEEDED', 'MAX_DURATION_EXCEEDED', 'DONE_BY_RUNNER']);
  });

  it('the stop criteria met at the max_duration: done, not failed', () => {
    const core = started({ ...pd, max_duration_s: 10 });
    expect(endingOf(pass(core, [jobs(core, [0, 1, 2, 3].map((n) => exited(n, 0)))], T0 + 12_000).effects)).toEqual({ kind: 'done' });
  });
});

describe('after teardown', () => {
  const failure: Ending = { kind: 'failed', job_num: 0, retry_event: 'error', message: 'job 0 failed' };
  const retrying = () => started(pd, { retry: { on_events: ['error'], duration_s: 60 } });

  it('a covered failure within the duration is submitted again, the back-off doubling up to 5 minutes', () => {
    let core = retrying();
    const backoffs: number[] = [];
    for (let i = 0; i < 8; i++) {
      const d = decideAfterTeardown(core, failure, T0 + 5000);
      backoffs.push(...d.effects.flatMap((e) => (e.kind === 'resubmit' ? [e.after_s] : [])));
      core = d.state;
    }
    expect(backoffs).toEqual([5, 10, 20, 40, 80, 160, 300, 300]);
  });

  it('past the duration: RETRY_LIMIT_EXCEEDED; not covered: JOB_FAILED', () => {
    expect(decideAfterTeardown(retrying(), failure, T0 + 60_000).effects).toEqual([
      { kind: 'finish', status: 'FAILED', reason: 'RETRY_LIMIT_EXCEEDED', message: 'job 0 failed' },
    ]);
    expect(decideAfterTeardown(retrying(), { ...failure, retry_event: 'no-capacity' }, T0).effects).toEqual([
      { kind: 'finish', status: 'FAILED', reason: 'JOB_FAILED', message: 'job 0 failed' },
    ]);
  });

  it('a teardown problem is kept after the failure in the message', () => {
    const core = started(pd);
    core.run.message = 'teardown incomplete: host gone';
    expect(decideAfterTeardown(core, failure, T0).effects).toEqual([
      { kind: 'finish', status: 'FAILED', reason: 'JOB_FAILED', message: 'job 0 failed; teardown incomplete: host gone' },
    ]);
  });

  it.each<[Ending, string, string]>([
    [{ kind: 'done' }, 'DONE', 'ALL_JOBS_DONE'],
    [{ kind: 'stopped', abort: false }, 'TERMINATED', 'STOPPED_BY_USER'],
    [{ kind: 'stopped', abort: true }, 'TERMINATED', 'ABORTED_BY_USER'],
  ])('%j ends the run %s (%s)', (ending, status, reason) => {
    expect(decideAfterTeardown(started(pd), ending, T0).effects).toEqual([{ kind: 'finish', status, reason, message: null }]);
  });

  it('a stop asked while a retried failure was torn down ends the run as stopped', () => {
    const core = pass(retrying(), [{ kind: 'stop', abort: false }], T0 + 3000).core;
    expect(decideAfterTeardown(core, failure, T0 + 4000).effects).toEqual([{ kind: 'finish', status: 'TERMINATED', reason: 'STOPPED_BY_USER', message: null }]);
  });

  it('teardown stops what is open: as the user asked, or by the server', () => {
    expect(teardownOf({ kind: 'stopped', abort: true })).toEqual({ status: 'ABORTED', reason: 'ABORTED_BY_USER', graceful: false });
    expect(teardownOf({ kind: 'stopped', abort: false })).toEqual({ status: 'TERMINATED', reason: 'TERMINATED_BY_USER', graceful: true });
    expect(teardownOf(failure)).toEqual({ status: 'TERMINATED', reason: 'TERMINATED_BY_SERVER', graceful: true });
  });

  it('a resubmission starts fresh: the next number, every job again, no failures remembered, unlocking', () => {
    const core = pass(retrying(), [jobs(retrying(), [{ kind: 'failed', job_num: 1, reason: 'INSTANCE_UNREACHABLE', message: 'gone', retry_event: 'interruption' }])], T0 + 3000).core;
    const next = resubmit(core, T0 + 9000);
    expect(next.run.submission).toBe(1);
    expect(next.run.jobs.map((j) => [j.status, j.instance])).toEqual([0, 1, 2, 3].map(() => ['PROVISIONING', null]));
    expect(next.failure_events).toEqual({});
    expect(next.submission).toEqual({ phase: 'unlocking', addresses_due_ms: null, running_since_ms: null, group_failure: null, ending: null });
  });
});

describe('any sequence of events', () => {
  const eventArb = (jobCount: number): fc.Arbitrary<RunEvent> => {
    const n = fc.integer({ min: 0, max: jobCount - 1 });
    const jobEvent: fc.Arbitrary<JobEvent> = fc.oneof(
      n.map((i) => provisioned(i)),
      n.map(running),
      fc.tuple(n, fc.integer({ min: 0, max: 2 })).map(([i, code]) => exited(i, code)),
    );
    return fc.oneof(
      { arbitrary: fc.array(jobEvent, { minLength: 1, maxLength: 4 }).map((events): RunEvent => ({ kind: 'jobs', submission: 0, events })), weight: 8 },
      { arbitrary: fc.boolean().map((abort): RunEvent => ({ kind: 'stop', abort })), weight: 1 },
      { arbitrary: fc.constant<RunEvent>({ kind: 'group-failed', submission: 0, message: 'group g: boom' }), weight: 1 },
      { arbitrary: fc.constant<RunEvent>({ kind: 'unlocked' }), weight: 2 },
      { arbitrary: fc.constant<RunEvent>({ kind: 'announced' }), weight: 2 },
      { arbitrary: fc.constant<RunEvent>({ kind: 'tick' }), weight: 3 },
    );
  };

  it('ends a submission at most once, and an ending never changes; RUNNING at most once; done only once started with every node done', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(eventArb(4), fc.integer({ min: 0, max: 5_000 })), { maxLength: 40 }), (steps) => {
        let core = coreOf({ ...pd, max_duration_s: 20 });
        let now = T0;
        let ending: Ending | null = null;
        let ends = 0;
        let runningStatus = 0;
        for (const [event, dt] of steps) {
          now += dt;
          const d = decideOutcome(core, event, now);
          core = d.state;
          for (const effect of d.effects) {
            if (effect.kind === 'end-submission') ends += 1;
            if (effect.kind === 'set-status' && effect.status === 'RUNNING') runningStatus += 1;
          }
          if (ending) expect(core.submission.ending).toEqual(ending);
          ending = core.submission.ending;
          if (ending?.kind === 'done') {
            expect(core.submission.phase).toBe('started');
            expect(core.run.jobs.every((j) => j.exit_code === 0)).toBe(true);
          }
        }
        expect(ends).toBe(ending ? 1 : 0);
        expect(runningStatus).toBeLessThanOrEqual(1);
      }),
      { numRuns: 300 },
    );
  });
});
