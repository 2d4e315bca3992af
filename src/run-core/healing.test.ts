import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { OnFailure, Plan } from '../plan/plan-schema';
import { makePlan } from '../../test/helpers/plans';
import { endingOf, exited, instance, jobs, pass, provisioned, ready, running, started, T0 } from '../../test/helpers/run-core';
import type { Effect } from './effects';
import { restartOver } from './healing';
import { withAddedByResize, withAttemptsToStart } from './live';
import type { RunCore } from './state';

/**
 * The healing policy over sequences of events, no server: which nodes are replaced, the budgets,
 * dependents that restart after the group they depend on is back, and a failed node a resize added.
 */

/** router 0 (depends on decode), prefill 1, decode 2 and 3. */
function pd(onFailure: OnFailure, opts: { dependents?: 'restart' | 'keep' } = {}): Plan {
  const plan = makePlan('pd', [{ name: 'router', nodes: 1 }, { name: 'prefill', nodes: 1 }, { name: 'decode', nodes: 2 }]);
  plan.groups[2]!.on_failure = onFailure;
  plan.groups[0]!.depends_on = [2];
  if (opts.dependents) plan.groups[0]!.on_dependency_restart = opts.dependents;
  return plan;
}

const restartNode = (max: number, within: number | null = null): OnFailure => ({ action: 'restart-node', max_restarts: max, within_s: within });
const newAttempts = (effects: Effect[]) => effects.filter((e) => e.kind === 'new-attempts');

/** The rank's current attempt fails (exits with an error) at `now`. */
function fail(core: RunCore, n: number, now: number) {
  return pass(core, [jobs(core, [exited(n, 1, core.run.jobs[n]!.attempt)])], now);
}

/** The rank's current attempt gets its machine, is let start, and runs (READY without a probe). */
function comesBack(core: RunCore, n: number, now: number): RunCore {
  const attempt = core.run.jobs[n]!.attempt;
  const live = core.live!;
  const left = { ...live.attempts_to_start };
  delete left[n];
  // What the shell does when it lets the attempt start (workflows/run/run-attempts.ts).
  const letStart = { ...core, live: { ...live, attempts_to_start: left } };
  return pass(letStart, [jobs(letStart, [provisioned(n, attempt), running(n, attempt), ready(n, attempt)])], now).core;
}

describe('restart-node', () => {
  it('a failed node gets a new machine at its rank; the run goes on; the old machine is given back', () => {
    const { core, effects } = fail(started(pd(restartNode(2))), 3, T0 + 5000);
    expect(endingOf(effects)).toBeUndefined();
    expect(newAttempts(effects)).toEqual([
      { kind: 'new-attempts', group: 2, jobs: [{ job_num: 3, attempt: 1 }], release: [{ job_num: 3, attempt: 0, instance: instance(3) }], restart: true },
    ]);
    const job = core.run.jobs[3]!;
    expect([job.status, job.attempt, job.restarts, job.instance]).toEqual(['PROVISIONING', 1, 1, null]);
    expect(job.previous_attempts.map((a) => [a.attempt, a.status, a.exit_code])).toEqual([[0, 'FAILED', 1]]);
    expect(core.run.groups[2]!.restarts).toBe(1);
    expect(core.live!.attempts_to_start).toEqual({ 3: 1 });
    expect(core.live!.groups[2]).toEqual({ restarting: true, restart_after_dependencies: false });
    // The other decode node runs on.
    expect(core.run.jobs[2]!.status).toBe('RUNNING');
  });

  it('past max_restarts the run fails, naming the group, its restarts and the last failure', () => {
    let core = started(pd(restartNode(2)));
    for (const [i, t] of [5000, 6000].entries()) {
      core = fail(core, 3, T0 + t).core;
      core = comesBack(core, 3, T0 + t + 100);
      expect(core.run.jobs[3]!.attempt).toBe(i + 1);
    }
    const { effects } = fail(core, 3, T0 + 7000);
    expect(newAttempts(effects)).toEqual([]);
    expect(endingOf(effects)).toEqual({
      kind: 'failed',
      job_num: 3,
      retry_event: 'error',
      message: 'group decode: restart budget exhausted (2 of max_restarts 2); last failure: job 3 (decode/1) on local failed: CONTAINER_EXITED_WITH_ERROR: exited with code 1',
    });
  });

  it('restarts older than within_s do not count', () => {
    let core = started(pd(restartNode(1, 60)));
    core = comesBack(fail(core, 3, T0 + 5000).core, 3, T0 + 5100);
    // Within the minute: the budget is spent.
    expect(endingOf(fail(core, 3, T0 + 30_000).effects)?.kind).toBe('failed');
    // A minute later: a restart again, not an ending.
    const later = fail(core, 3, T0 + 66_000);
    expect(endingOf(later.effects)).toBeUndefined();
    expect(newAttempts(later.effects)).toHaveLength(1);
  });

  it('a failure that names its retry event keeps it when the budget ends the run', () => {
    const core = started(pd(restartNode(0)));
    const { effects } = pass(core, [jobs(core, [{ kind: 'failed', job_num: 2, reason: 'INSTANCE_UNREACHABLE', message: 'gone', retry_event: 'interruption' }])], T0 + 5000);
    expect(endingOf(effects)).toMatchObject({ kind: 'failed', job_num: 2, retry_event: 'interruption' });
  });

  it('a group without on_failure fails the run as dstack does', () => {
    const core = started(pd(restartNode(2)));
    expect(endingOf(fail(core, 1, T0 + 5000).effects)).toMatchObject({ kind: 'failed', job_num: 1 });
  });
});

describe('restart-group and dependents', () => {
  it('restart-group replaces every node of the group in one ask', () => {
    const { effects, core } = fail(started(pd({ action: 'restart-group', max_restarts: 1, within_s: null })), 2, T0 + 5000);
    expect(newAttempts(effects)).toEqual([
      {
        kind: 'new-attempts',
        group: 2,
        jobs: [{ job_num: 2, attempt: 1 }, { job_num: 3, attempt: 1 }],
        release: [{ job_num: 2, attempt: 0, instance: instance(2) }, { job_num: 3, attempt: 0, instance: instance(3) }],
        restart: true,
      },
    ]);
    expect(core.run.jobs.map((j) => j.attempt)).toEqual([0, 0, 1, 1]);
  });

  it('on_dependency_restart: restart — the dependent restarts once the group it depends on is READY again, not before', () => {
    let core = fail(started(pd(restartNode(3), { dependents: 'restart' })), 3, T0 + 5000).core;
    expect(core.live!.groups[0]).toEqual({ restarting: false, restart_after_dependencies: true });
    // decode/1 not back yet: the router runs on.
    let step = pass(core, [], T0 + 6000);
    expect(newAttempts(step.effects)).toEqual([]);
    expect(restartOver(step.core, 2)).toBe(false);
    core = comesBack(step.core, 3, T0 + 7000);
    expect(core.run.jobs[0]!.attempt).toBe(1);
    expect(core.live!.groups.map((g) => g.restarting)).toEqual([true, false, false]);
    step = pass(core, [], T0 + 8000);
    expect(newAttempts(step.effects)).toEqual([]);
  });

  it('on_dependency_restart: keep (the default) — the dependent runs on', () => {
    const core = comesBack(fail(started(pd(restartNode(3))), 3, T0 + 5000).core, 3, T0 + 6000);
    expect(core.run.jobs[0]!.attempt).toBe(0);
    expect(core.live!.groups.every((g) => !g.restarting && !g.restart_after_dependencies)).toBe(true);
  });
});

describe('a node a resize added', () => {
  it('that fails is taken out and its machine given back: no restart, no ending', () => {
    let core = started(pd(restartNode(2)));
    core.run.jobs.push({ ...core.run.jobs[3]!, job_num: 4, job_name: 'pd-4-0', group_job_index: 2, status: 'PROVISIONING', instance: null, pid: null, running_at: null });
    core = withAttemptsToStart(withAddedByResize(core, [4], true), [{ job_num: 4, attempt: 0 }]);
    core = pass(core, [jobs(core, [provisioned(4)])], T0 + 5000).core;
    const { core: after, effects } = pass(core, [jobs(core, [{ kind: 'failed', job_num: 4, reason: 'EXECUTOR_ERROR', message: 'no start', retry_event: 'error' }])], T0 + 6000);
    expect(effects).toEqual([{ kind: 'give-back', job_num: 4, attempt: 0, instance: instance(4) }]);
    expect(after.run.jobs[4]!.removed).toBe(true);
    expect(after.live!.attempts_to_start).toEqual({});
    expect(after.run.groups[2]!.restarts).toBe(0);
  });
});

describe('any sequence of failures and returns', () => {
  it('restarts exactly as many times as the budget allows, then ends the run once; the state counts each restart', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 4 }),
        fc.array(fc.tuple(fc.constantFrom(2, 3), fc.boolean()), { minLength: 1, maxLength: 12 }),
        (max, steps) => {
          let core = started(pd(restartNode(max)));
          let now = T0 + 5000;
          let restarts = 0;
          let failures = 0;
          for (const [n, back] of steps) {
            if (core.submission.ending) break;
            // A rank whose new attempt has not run yet cannot fail again as that attempt: bring it back first.
            if (core.run.jobs[n]!.status === 'PROVISIONING') core = comesBack(core, n, (now += 10));
            const step = fail(core, n, (now += 1000));
            failures += 1;
            restarts += newAttempts(step.effects).length;
            core = step.core;
            if (back && !core.submission.ending) core = comesBack(core, n, (now += 10));
            expect(core.run.groups[2]!.restarts).toBe(restarts);
          }
          expect(restarts).toBe(Math.min(failures, max));
          expect(core.submission.ending !== null).toBe(failures > max);
        },
      ),
      { numRuns: 200 },
    );
  });
});
