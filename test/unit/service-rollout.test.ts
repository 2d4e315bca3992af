import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors';
import { loadServicePlan, RolloutPlanSchema, serviceRunPlan, type RolloutPlan } from '../../src/plan';

/** `rollout:` (Troupe's extension, issue 28): accepted and planned with every default, refused in one line at file:line:col. */

const FILE = 'service.yml';
const svc = (...lines: string[]) => ['type: service', 'port: 8000', 'auth: false', 'commands: [serve]', ...lines].join('\n');
const rollout = (...lines: string[]): RolloutPlan => loadServicePlan(svc(...lines), FILE, { environ: {}, runName: 'svc' }).rollout;

function refusal(text: string): string {
  try {
    loadServicePlan(text, FILE, { environ: {}, runName: 'svc' });
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  throw new Error('expected a refusal');
}

const INDEPENDENT: RolloutPlan = {
  coherence: 'independent',
  max_surge: { kind: 'count', n: 1 },
  steps: 1,
  canary: null,
  gates: { error_rate: 0.05, p95_factor: 2, progress_deadline_s: 600 },
  rollback: 'auto',
  drain_timeout_s: 30,
};

describe('rollout: the plan with its defaults', () => {
  it.each<[string, string[], RolloutPlan]>([
    ['no rollout: independent, as dstack rolls (one replica of a group at a time)', [], INDEPENDENT],
    ['rollout: null', ['rollout: null'], INDEPENDENT],
    ['rollout: {}', ['rollout: {}'], INDEPENDENT],
    ['independent with its own drain and rollback', ['rollout: {coherence: independent, steps: 1, rollback: manual, drain_timeout: 2m}'], { ...INDEPENDENT, rollback: 'manual', drain_timeout_s: 120 }],
    ['coherence: revision: the full share at once, one step, no canary', ['rollout: {coherence: revision}'], { ...INDEPENDENT, coherence: 'revision', max_surge: { kind: 'percent', p: 100 } }],
    [
      'every field written',
      [
        'rollout:',
        '  coherence: revision',
        '  max_surge: "25%"',
        '  steps: 4',
        '  canary: {traffic: 10, soak: 5m}',
        '  gates: {error_rate: 0.01, p95_factor: 1.5, progress_deadline: 1h}',
        '  rollback: manual',
        '  drain_timeout: 0',
      ],
      {
        coherence: 'revision',
        max_surge: { kind: 'percent', p: 25 },
        steps: 4,
        canary: { traffic_percent: 10, soak_s: 300 },
        gates: { error_rate: 0.01, p95_factor: 1.5, progress_deadline_s: 3600 },
        rollback: 'manual',
        drain_timeout_s: 0,
      },
    ],
    [
      'a surge count, traffic as "P%", some gates',
      ['rollout: {coherence: revision, max_surge: 2, canary: {traffic: "5%", soak: 30}, gates: {p95_factor: 3}}'],
      { ...INDEPENDENT, coherence: 'revision', max_surge: { kind: 'count', n: 2 }, canary: { traffic_percent: 5, soak_s: 30 }, gates: { ...INDEPENDENT.gates, p95_factor: 3 } },
    ],
  ])('%s', (_what, lines, expected) => {
    const plan = rollout(...lines);
    expect(plan).toEqual(expected);
    expect(RolloutPlanSchema.parse(plan)).toEqual(plan);
  });

  it("is the run plan's service.rollout, and is not part of the revision", () => {
    const service = loadServicePlan(svc('rollout: {coherence: revision, drain_timeout: 10s}'), FILE, { environ: {} });
    expect(serviceRunPlan(service, null).service?.rollout).toEqual(service.rollout);
    expect(service.revision).toBe(loadServicePlan(svc(), FILE, { environ: {} }).revision);
  });
});

describe('rollout refusals: one line at file:line:col naming the field', () => {
  const needs = (written: string, field: string, independent: string, why: string) =>
    `${written} needs coherence: revision: with ${independent} each group rolls on its own, one replica at a time, as dstack does, ${why}; add coherence: revision, or remove \`${field}\``;

  it.each<[string, string, string]>([
    ['canary without coherence', svc('rollout: {canary: {traffic: 10, soak: 1m}}'), `service.yml:5:11: rollout.canary: ${needs('`canary`', 'canary', 'independent (the default)', 'so no whole new revision can take a share of requests')}`],
    ['steps > 1 with independent', svc('rollout: {coherence: independent, steps: 3}'), `service.yml:5:35: rollout.steps: ${needs('`steps: 3`', 'steps', 'coherence: independent', 'in no steps of its own')}`],
    ['gates without coherence', svc('rollout:', '  gates: {error_rate: 0.1}'), `service.yml:6:3: rollout.gates: ${needs('`gates`', 'gates', 'independent (the default)', 'so there is no new revision to gate against the old')}`],
    ['max_surge without coherence', svc('rollout: {max_surge: 2}'), `service.yml:5:11: rollout.max_surge: ${needs('`max_surge`', 'max_surge', 'independent (the default)', 'so there are no steps to size')}`],
    ['an unknown coherence', svc('rollout: {coherence: blue-green}'), 'service.yml:5:22: rollout.coherence: expected one of revision, independent, got a string ("blue-green")'],
    ['no surge', svc('rollout: {coherence: revision, max_surge: 0}'), 'service.yml:5:43: rollout.max_surge: expected a number of replicas (1 or more) or a percentage such as "50%", got a number (0)'],
    ['a surge above 100%', svc('rollout: {coherence: revision, max_surge: "150%"}'), 'service.yml:5:43: rollout.max_surge: a surge percentage must be 1%..100%, got a string ("150%")'],
    ['steps 0', svc('rollout: {coherence: revision, steps: 0}'), 'service.yml:5:39: rollout.steps: expected an integer >= 1, got a number (0)'],
    ['canary traffic 100', svc('rollout: {coherence: revision, canary: {traffic: 100, soak: 1m}}'), 'service.yml:5:50: rollout.canary.traffic: expected a percentage of requests 1..99, such as 10 or "10%", got a number (100)'],
    ['canary traffic 0%', svc('rollout: {coherence: revision, canary: {traffic: "0%", soak: 1m}}'), 'service.yml:5:50: rollout.canary.traffic: expected a percentage of requests 1..99, such as 10 or "10%", got a string ("0%")'],
    ['a canary without soak', svc('rollout: {coherence: revision, canary: {traffic: 10}}'), 'service.yml:5:40: rollout.canary.soak: required field is missing'],
    ['a soak of 0', svc('rollout: {coherence: revision, canary: {traffic: 10, soak: 0}}'), 'service.yml:5:60: rollout.canary.soak: expected a duration of at least 1s, got a number (0)'],
    ['an error rate above 1', svc('rollout: {coherence: revision, gates: {error_rate: 5}}'), 'service.yml:5:52: rollout.gates.error_rate: expected an error rate 0..1 (0.05 is 5% of requests), got a number (5)'],
    ['a p95 factor of 1', svc('rollout: {coherence: revision, gates: {p95_factor: 1}}'), "service.yml:5:52: rollout.gates.p95_factor: expected a number > 1 (how many times the old revision's p95 latency the new one may take), got a number (1)"],
    ['a progress deadline that is no duration', svc('rollout: {coherence: revision, gates: {progress_deadline: soon}}'), 'service.yml:5:59: rollout.gates.progress_deadline: expected a duration such as 90 (seconds), 30s, 5m, 1h, 2d or 1w, got a string ("soon")'],
    ['an unknown rollback', svc('rollout: {coherence: revision, rollback: never}'), 'service.yml:5:42: rollout.rollback: expected one of auto, manual, got a string ("never")'],
    ['a negative drain timeout', svc('rollout: {coherence: revision, drain_timeout: -1}'), 'service.yml:5:47: rollout.drain_timeout: expected a duration of at least 0s, got a number (-1)'],
    ['an unknown field', svc('rollout: {coherence: revision, max_surg: 1}'), 'service.yml:5:32: rollout.max_surg: unknown field `max_surg` in `rollout` (did you mean `max_surge`?)'],
    ['an unknown canary field', svc('rollout: {coherence: revision, canary: {traffic: 10, soak: 1m, weight: 3}}'), 'service.yml:5:64: rollout.canary.weight: unknown field `weight` in `canary`'],
    ['not a mapping', svc('rollout: fast'), 'service.yml:5:10: rollout: expected a mapping, got a string ("fast")'],
  ])('%s', (_what, text, expected) => {
    expect(refusal(text)).toBe(expected);
  });
});
