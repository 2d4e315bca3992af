import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { makePlan } from '../../test/helpers/plans';
import { exited, jobs, pass, provisioned, ready, running, started, T0 } from '../../test/helpers/run-core';
import type { Effect } from './effects';
import type { RunEvent } from './events';
import { CarriedCoreSchema } from '../contract/core-state-schema';
import type { RunCore } from './state';

/**
 * Hand-over is the core itself: what an execution hands the next (continue-as-new) is its core as
 * JSON, checked by its schema, the plan taken from the input again. Whatever happened before, the
 * next execution decides exactly as this one would have.
 */

const plan = makePlan('live', [{ name: 'router', nodes: 1 }, { name: 'decode', nodes: 2 }]);
plan.groups[1]!.nodes_range = { min: 1, max: 4 };
plan.groups[1]!.on_failure = { action: 'restart-node', max_restarts: 2, within_s: 60 };
plan.groups[0]!.depends_on = [1];
plan.groups[0]!.on_dependency_restart = 'restart';

/** What crosses to the next execution: JSON, parsed with the schema, the plan the input's. */
function handOver(core: RunCore): RunCore {
  const { plan: _, ...carried } = core;
  return { ...CarriedCoreSchema.parse(JSON.parse(JSON.stringify(carried))), plan: core.plan };
}

function run(core: RunCore, steps: Array<[RunEvent[], number]>): { core: RunCore; effects: Effect[] } {
  let state = core;
  const effects: Effect[] = [];
  for (const [events, now] of steps) {
    const step = pass(state, events, now);
    state = step.core;
    effects.push(...step.effects);
  }
  return { core: state, effects };
}

const stepArb = (core: RunCore): fc.Arbitrary<[RunEvent[], number]> => {
  const rank = fc.integer({ min: 0, max: 4 });
  const jobEvent = fc.oneof(
    rank.map((n) => provisioned(n)),
    rank.map((n) => running(n)),
    rank.map((n) => ready(n)),
    fc.tuple(rank, fc.integer({ min: 0, max: 1 })).map(([n, code]) => exited(n, code)),
  );
  const event: fc.Arbitrary<RunEvent> = fc.oneof(
    { arbitrary: fc.array(jobEvent, { minLength: 1, maxLength: 3 }).map((events): RunEvent => ({ kind: 'jobs', submission: core.run.submission, events })), weight: 6 },
    { arbitrary: fc.integer({ min: 1, max: 4 }).map((nodes): RunEvent => ({ kind: 'resize', id: nodes, group: 1, nodes })), weight: 1 },
    { arbitrary: fc.integer({ min: 1, max: 4 }).map((id): RunEvent => ({ kind: 'released', id, error: null })), weight: 1 },
    { arbitrary: fc.constant<RunEvent>({ kind: 'stop', abort: false }), weight: 1 },
  );
  return fc.tuple(fc.array(event, { maxLength: 3 }), fc.integer({ min: 0, max: 20_000 }));
};

describe('hand-over', () => {
  it('at any moment: the next execution decides as this one would have', () => {
    fc.assert(
      fc.property(
        fc.array(stepArb(started(plan)), { maxLength: 12 }),
        fc.array(stepArb(started(plan)), { maxLength: 12 }),
        (before, after) => {
          const timed = (steps: Array<[RunEvent[], number]>, from: number) => {
            let now = from;
            return steps.map(([events, dt]): [RunEvent[], number] => [events, (now += dt)]);
          };
          const first = timed(before, T0 + 3000);
          const rest = timed(after, (first.at(-1)?.[1] ?? T0 + 3000) + 1);
          const here = run(started(plan), first).core;
          const stayed = run(structuredClone(here), rest);
          const moved = run(handOver(here), rest);
          expect(moved.effects).toEqual(stayed.effects);
          expect(moved.core).toEqual(stayed.core);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('what is handed over names no plan, and a core that lost a field is refused', () => {
    const { plan: _, ...carried } = started(plan);
    expect(JSON.stringify(CarriedCoreSchema.parse(carried))).not.toContain('"plan"');
    const { submission: __, ...broken } = carried;
    expect(CarriedCoreSchema.safeParse(broken).success).toBe(false);
  });

  it('a job event after the hand-over is applied to the same job records', () => {
    const moved = handOver(started(plan));
    const { core } = pass(moved, [jobs(moved, [exited(0, 0), exited(1, 0), exited(2, 0)])], T0 + 9000);
    expect(core.submission.ending).toEqual({ kind: 'done' });
  });
});
