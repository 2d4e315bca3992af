import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Plan } from '../plan/plan-schema';
import { makePlan } from '../../test/helpers/plans';
import { instance, jobs, pass, provisioned, ready, running, started, T0 } from '../../test/helpers/run-core';
import type { Effect } from './effects';
import type { RunEvent } from './events';
import { groupMembers } from './jobs';
import { resizeOf } from './scaling';
import type { RunCore } from './state';

/**
 * The scaling policy over sequences of events, no server: new ranks after every other, the highest
 * removed, a growth undone whole when a new node fails, and the refusals.
 */

/** router 0, prefill 1, decode 2 and 3 (`nodes: 1..5`, restart-node). */
function pd(): Plan {
  const plan = makePlan('pd', [{ name: 'router', nodes: 1 }, { name: 'prefill', nodes: 1 }, { name: 'decode', nodes: 2 }]);
  plan.groups[2]!.nodes_range = { min: 1, max: 5 };
  plan.groups[2]!.on_failure = { action: 'restart-node', max_restarts: 3, within_s: null };
  return plan;
}

const resize = (id: number, nodes: number): RunEvent => ({ kind: 'resize', id, group: 2, nodes });
const of = (effects: Effect[], kind: Effect['kind']) => effects.filter((e) => e.kind === kind);

/** The new attempts start (as the shell lets them) and run. */
function runs(core: RunCore, ranks: number[], now: number): RunCore {
  const live = core.live!;
  const left = { ...live.attempts_to_start };
  for (const n of ranks) delete left[n];
  const letStart = { ...core, live: { ...live, attempts_to_start: left } };
  const attempt = (n: number) => letStart.run.jobs[n]!.attempt;
  return pass(letStart, [jobs(letStart, ranks.flatMap((n) => [provisioned(n, attempt(n)), running(n, attempt(n)), ready(n, attempt(n))]))], now).core;
}

describe('growing', () => {
  it('new ranks come after every other, in the group; the resize is over once they run', () => {
    const { core, effects } = pass(started(pd()), [resize(1, 4)], T0 + 5000);
    expect(of(effects, 'new-attempts')).toEqual([
      { kind: 'new-attempts', group: 2, jobs: [{ job_num: 4, attempt: 0 }, { job_num: 5, attempt: 0 }], release: [], restart: false },
    ]);
    expect(core.run.jobs.slice(4).map((j) => [j.job_name, j.group_name, j.group_job_index, j.status])).toEqual([
      ['pd-4-0', 'decode', 2, 'PROVISIONING'],
      ['pd-5-0', 'decode', 3, 'PROVISIONING'],
    ]);
    expect(core.live!.added_plans[5]).toMatchObject({ job_num: 5, node_group_index: 2, node_group_job_index: 3, global_master: false, group_master: false });
    expect(resizeOf(core, 1)).toMatchObject({ phase: 'growing', added: [4, 5] });
    const half = runs(core, [4], T0 + 6000);
    expect(resizeOf(half, 1)?.phase).toBe('growing');
    const done = runs(half, [5], T0 + 7000);
    expect(resizeOf(done, 1)).toEqual({ id: 1, group: 2, phase: 'over', added: [4, 5], removed: [], draining: [], drain_asked: false, error: null });
    expect(done.run.groups[2]!.nodes).toBe(4);
    expect(done.live!.added_by_resize).toEqual([]);
    const answered = pass(done, [{ kind: 'resize-answered', id: 1 }], T0 + 7100).core;
    expect(answered.live!.resizes).toEqual([]);
  });

  it('a new node that fails undoes the growth whole: it is given back, the others taken out; the group as it was', () => {
    let core = pass(started(pd()), [resize(1, 4)], T0 + 5000).core;
    core = runs(core, [4], T0 + 6000);
    const failing = pass(core, [jobs(core, [provisioned(5), { kind: 'failed', job_num: 5, reason: 'EXECUTOR_ERROR', message: 'no start', retry_event: 'error' }])], T0 + 7000);
    expect(of(failing.effects, 'give-back')).toEqual([{ kind: 'give-back', job_num: 5, attempt: 0, instance: instance(5) }]);
    expect(of(failing.effects, 'release')).toEqual([
      { kind: 'release', resize: 1, jobs: [{ job_num: 4, attempt: 0, instance: instance(4) }], summary: 'remove decode rank 4 (the resize failed)' },
    ]);
    expect(of(failing.effects, 'new-attempts')).toEqual([]); // no restart of an added node
    expect(of(failing.effects, 'end-submission')).toEqual([]);
    const over = pass(failing.core, [{ kind: 'released', id: 1, error: null }], T0 + 8000).core;
    expect(resizeOf(over, 1)).toMatchObject({ phase: 'over', error: 'decode/3 (job 5) did not start: no start' });
    expect(groupMembers(over.run.jobs, 2).map((j) => j.job_num)).toEqual([2, 3]);
    expect(over.run.groups[2]!.nodes).toBe(2);
  });

  it('the run ending first answers the resize with why', () => {
    let core = pass(started(pd()), [resize(1, 3)], T0 + 5000).core;
    core = pass(core, [{ kind: 'stop', abort: false }], T0 + 6000).core;
    core.run.status = 'TERMINATING';
    expect(resizeOf(pass(core, [], T0 + 6100).core, 1)).toMatchObject({ phase: 'over', error: 'the run ended (TERMINATING) before decode grew' });
  });
});

describe('shrinking', () => {
  it('the highest ranks leave the run at once, then are stopped and given back', () => {
    const { core, effects } = pass(started(pd()), [resize(1, 1)], T0 + 5000);
    expect(of(effects, 'release')).toEqual([
      { kind: 'release', resize: 1, jobs: [{ job_num: 3, attempt: 0, instance: instance(3) }], summary: 'remove decode rank 3 (decode resized to 1)' },
    ]);
    const job = core.run.jobs[3]!;
    expect([job.removed, job.status, job.termination_reason, job.message]).toEqual([true, 'TERMINATED', 'TERMINATED_BY_SERVER', 'removed: decode resized to 1']);
    expect(resizeOf(core, 1)?.phase).toBe('releasing');
    // A removed node's end does not end the run.
    expect(of(effects, 'end-submission')).toEqual([]);
    const over = pass(core, [{ kind: 'released', id: 1, error: null }], T0 + 6000).core;
    expect(resizeOf(over, 1)).toEqual({ id: 1, group: 2, phase: 'over', added: [], removed: [3], draining: [], drain_asked: false, error: null });
    expect(over.run.groups[2]!.nodes).toBe(1);
  });

  it('a rank given up is taken again by the next growth, at its next attempt', () => {
    let core = pass(started(pd()), [resize(1, 1), { kind: 'released', id: 1, error: null }, { kind: 'resize-answered', id: 1 }], T0 + 5000).core;
    const { core: grown, effects } = pass(core, [resize(2, 2)], T0 + 6000);
    expect(of(effects, 'new-attempts')).toEqual([{ kind: 'new-attempts', group: 2, jobs: [{ job_num: 3, attempt: 1 }], release: [], restart: false }]);
    expect(grown.run.jobs).toHaveLength(4);
    expect(grown.run.jobs[3]).toMatchObject({ removed: false, attempt: 1, restarts: 0, status: 'PROVISIONING' });
    core = runs(grown, [3], T0 + 7000);
    expect(resizeOf(core, 2)).toMatchObject({ phase: 'over', added: [3] });
  });
});

describe('refusals', () => {
  it.each<[string, (core: RunCore) => RunCore, string]>([
    ['before the run is RUNNING', (c) => ({ ...c, run: { ...c.run, status: 'PROVISIONING' } }), 'run pd is PROVISIONING: a group is resized while the run is RUNNING'],
    ['once a stop is asked', (c) => ({ ...c, stop_request: { abort: false } }), 'run pd is stopping: a group is resized while the run is RUNNING'],
    ['while the group restarts', (c) => pass(c, [jobs(c, [{ kind: 'exited', job_num: 3, exit_code: 1 }])], T0 + 4000).core, 'group decode is restarting; try again once its nodes are READY'],
    ['while another resize of it is under way', (c) => pass(c, [resize(9, 3)], T0 + 4000).core, 'group decode is being resized already; try again when that ends'],
  ])('%s', (_, before, error) => {
    const core = pass(before(started(pd())), [resize(1, 4)], T0 + 5000).core;
    expect(resizeOf(core, 1)).toEqual({ id: 1, group: 2, phase: 'over', added: [], removed: [], draining: [], drain_asked: false, error });
  });
});

describe('any sequence of resizes', () => {
  it('the group has the size asked after each, its ranks unique, new ranks after every existing one', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 5 }), { minLength: 1, maxLength: 8 }), (sizes) => {
        let core = started(pd());
        let now = T0 + 5000;
        for (const [i, size] of sizes.entries()) {
          const before = core.run.jobs.length;
          const step = pass(core, [resize(i + 1, size)], (now += 100));
          core = step.core;
          const added = resizeOf(core, i + 1)?.added ?? [];
          if (resizeOf(core, i + 1)?.phase === 'growing') core = runs(core, added, (now += 100));
          if (resizeOf(core, i + 1)?.phase === 'releasing') core = pass(core, [{ kind: 'released', id: i + 1, error: null }], (now += 100)).core;
          const answer = resizeOf(core, i + 1);
          expect(answer).toMatchObject({ phase: 'over', error: null });
          core = pass(core, [{ kind: 'resize-answered', id: i + 1 }], (now += 100)).core;
          const members = groupMembers(core.run.jobs, 2);
          expect(members).toHaveLength(size);
          expect(core.run.groups[2]!.nodes).toBe(size);
          expect(core.run.jobs.map((j) => j.job_num)).toEqual(core.run.jobs.map((_, n) => n));
          // A new rank is taken only when no rank the group gave up is left.
          if (core.run.jobs.length > before) expect(core.run.jobs.slice(0, before).some((j) => j.removed && j.group_index === 2)).toBe(false);
          expect(core.submission.ending).toBeNull();
        }
        expect(core.live!.resizes).toEqual([]);
        expect(core.live!.added_by_resize).toEqual([]);
      }),
      { numRuns: 150 },
    );
  });
});
