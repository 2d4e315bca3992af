import { z } from 'zod';
import { closedObject, ruleIssue } from './closed-object';
import { parseDuration } from './duration';
import { intAtLeast, parsed, REQUIRED, ScalarError, scalar, toInt, toNumber } from './scalars';
import { describeValue } from './yaml-source';

/**
 * `rollout:` of a service (Troupe's extension, issue 28; dstack has no such field): how a new
 * revision replaces the old one.
 *
 *   rollout:
 *     coherence: revision      # or independent (the default): each group rolls on its own, as dstack does
 *     max_surge: 50%           # or a count; extra replicas of the new revision at once (default 100%)
 *     steps: 2                 # the new revision's share grows in this many steps (default 1)
 *     canary: {traffic: 10, soak: 5m}       # a share of the requests first, watched over the soak
 *     gates: {error_rate: 0.05, p95_factor: 2, progress_deadline: 10m}
 *     rollback: auto           # or manual
 *     drain_timeout: 30s       # how long the old revision's requests in flight may take to finish
 *
 * Field syntax here, the rule across fields (what only `coherence: revision` means) in the schema's
 * superRefine; the defaults are the planner's (load-service-plan.ts).
 */

export const CoherenceSchema = z.enum(['revision', 'independent']);
export const RollbackModeSchema = z.enum(['auto', 'manual']);

/** `max_surge: 2` (replicas of each group) or `"50%"` (of each group's replicas). */
export type SurgeInput = { kind: 'count'; n: number } | { kind: 'percent'; p: number };

function parseSurge(value: unknown): SurgeInput {
  const percent = typeof value === 'string' ? /^\s*(\d+)\s*%\s*$/.exec(value) : null;
  if (percent) {
    const p = Number(percent[1]);
    if (p < 1 || p > 100) throw new ScalarError(`a surge percentage must be 1%..100%, got ${describeValue(value)}`);
    return { kind: 'percent', p };
  }
  const n = toInt(value);
  // No surge (0) would stop old replicas before new ones serve: a rollout never does that.
  if (n === undefined || n < 1) throw new ScalarError(`expected a number of replicas (1 or more) or a percentage such as "50%", got ${describeValue(value)}`);
  return { kind: 'count', n };
}

/** `traffic: 10` or `"10%"`: the share of requests the canary takes, 1..99 percent. */
function parseTraffic(value: unknown): number {
  if (value === undefined) throw new ScalarError(REQUIRED);
  const percent = typeof value === 'string' ? /^\s*([^%]*?)\s*%\s*$/.exec(value) : null;
  const n = toNumber(percent ? percent[1] : value);
  if (n === undefined || n < 1 || n > 99) throw new ScalarError(`expected a percentage of requests 1..99, such as 10 or "10%", got ${describeValue(value)}`);
  return n;
}

function durationAtLeast(min: number) {
  return (value: unknown): number => {
    if (value === undefined) throw new ScalarError(REQUIRED);
    const seconds = parseDuration(value);
    if (seconds < min) throw new ScalarError(`expected a duration of at least ${min}s, got ${describeValue(value)}`);
    return seconds;
  };
}

export const CanaryInputSchema = closedObject(
  {
    traffic: parsed(parseTraffic),
    soak: parsed(durationAtLeast(1)),
  },
  { what: '`canary`' },
);

export const GatesInputSchema = closedObject(
  {
    error_rate: scalar('an error rate 0..1 (0.05 is 5% of requests)', (v) => {
      const n = toNumber(v);
      return n !== undefined && n >= 0 && n <= 1 ? n : undefined;
    }).optional(),
    p95_factor: scalar("a number > 1 (how many times the old revision's p95 latency the new one may take)", (v) => {
      const n = toNumber(v);
      return n !== undefined && n > 1 ? n : undefined;
    }).optional(),
    progress_deadline: parsed(durationAtLeast(1)).optional(),
  },
  { what: '`gates`' },
);

export const RolloutInputSchema = closedObject(
  {
    coherence: CoherenceSchema.optional(),
    max_surge: parsed(parseSurge).optional(),
    steps: intAtLeast(1).optional(),
    canary: CanaryInputSchema.nullish(),
    gates: GatesInputSchema.nullish(),
    rollback: RollbackModeSchema.optional(),
    drain_timeout: parsed(durationAtLeast(0)).optional(),
  },
  { what: '`rollout`' },
).superRefine((rollout, ctx) => {
  if (rollout.coherence === 'revision') return;
  const independent = rollout.coherence === undefined ? 'independent (the default)' : 'coherence: independent';
  const refuse = (field: string, written: string, why: string) =>
    ctx.addIssue(
      ruleIssue(
        [field],
        `${written} needs coherence: revision: with ${independent} each group rolls on its own, one replica at a time, as dstack does, ${why}; add coherence: revision, or remove \`${field}\``,
        'key',
      ),
    );
  if (rollout.max_surge !== undefined) refuse('max_surge', '`max_surge`', 'so there are no steps to size');
  if (rollout.steps !== undefined && rollout.steps > 1) refuse('steps', `\`steps: ${rollout.steps}\``, 'in no steps of its own');
  if (rollout.canary !== undefined && rollout.canary !== null) refuse('canary', '`canary`', 'so no whole new revision can take a share of requests');
  if (rollout.gates !== undefined && rollout.gates !== null) refuse('gates', '`gates`', 'so there is no new revision to gate against the old');
});
export type RolloutInput = z.output<typeof RolloutInputSchema>;
