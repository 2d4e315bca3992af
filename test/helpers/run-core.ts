import type { Plan } from '../../src/plan/plan-schema';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { decideRun } from '../../src/run-core/decide';
import type { Effect } from '../../src/run-core/effects';
import type { Ending } from '../../src/run-core/ending';
import type { RunEvent } from '../../src/run-core/events';
import { newRunCore, type RunCore } from '../../src/run-core/state';
import type { JobEvent } from '../../src/contract/message-schemas';

/** Fixtures for the run core's event-sequence tests: a core, passes of the loop, job events. */

export const T0 = Date.parse('2026-12-06T00:00:00Z');

export const instance = (n: number, attempt = 0) => ({ instance_id: `i-${n}-${attempt}`, host: 'local', internal_ip: `10.0.${attempt}.${n + 1}`, gpus: 0, details: {} });

export function coreOf(plan: Plan, opts: { retry?: RunCore['retry']; address_deadline_s?: number } = {}): RunCore {
  return newRunCore({
    plan,
    identity: { run_id: `run/${plan.run_name}`, run_uid: 'uid-1', backend: 'local' },
    limits: { address_deadline_s: opts.address_deadline_s ?? 600, provision_attempt_timeout_s: 60 },
    retry: opts.retry ?? null,
    backoff_s: 5,
    now: T0,
  });
}

/** Feeds events at `now` through every policy, as one pass of the run's loop does (a tick last); the effects in order. */
export function pass(core: RunCore, events: RunEvent[], now: number): { core: RunCore; effects: Effect[] } {
  const effects: Effect[] = [];
  let state = core;
  for (const event of [...events, { kind: 'tick' } as const]) {
    const d = decideRun(state, event, now);
    state = d.state;
    effects.push(...d.effects);
  }
  return { core: state, effects };
}

export const jobs = (core: RunCore, events: JobEvent[]): RunEvent => ({ kind: 'jobs', submission: core.run.submission, events });
export const provisioned = (n: number, attempt = 0): JobEvent => ({ kind: 'provisioned', job_num: n, attempt, instance: instance(n, attempt) });
export const running = (n: number, attempt = 0): JobEvent => ({ kind: 'running', job_num: n, attempt, pid: 100 + n });
export const ready = (n: number, attempt = 0): JobEvent => ({ kind: 'ready', job_num: n, attempt });
export const exited = (n: number, code: number, attempt = 0): JobEvent => ({ kind: 'exited', job_num: n, attempt, exit_code: code });

/** A submission through unlock and announcement with every job provisioned and running. */
export function started(plan: Plan, opts?: Parameters<typeof coreOf>[1]): RunCore {
  let core = coreOf(plan, opts);
  const all = plan.jobs.map((j) => j.job_num);
  core = pass(core, [jobs(core, all.map((n) => provisioned(n))), { kind: 'unlocked' }, { kind: 'announced' }], T0 + 1000).core;
  return pass(core, [jobs(core, all.map((n) => running(n)))], T0 + 2000).core;
}

export const endingOf = (effects: Effect[]): Ending | undefined => effects.flatMap((e) => (e.kind === 'end-submission' ? [e.ending] : []))[0];

/** The run's plan of service `pd` on port 8000 without auth, with these groups (YAML flow mappings) and top-level lines. */
export function openService(groups: string[], extra: string[] = []): Plan {
  const text = ['type: service', 'name: pd', 'port: 8000', 'auth: false', 'groups:', ...groups.map((g) => `  - ${g}`), ...extra].join('\n');
  return serviceRunPlan(loadServicePlan(text, 'pd.yml', { environ: {} }), null);
}

/**
 * What the shell and the nodes answer to an effect, when all goes well: a push landed, a book
 * delivered, a drain and a release done, a rollout's gate A passed, new attempts provisioned, running and READY.
 */
export function answersTo(core: RunCore, effect: Effect): RunEvent[] {
  switch (effect.kind) {
    case 'push-routes':
      return [{ kind: 'routes-pushed', generation: effect.generation, endpoints: ['http://gw/services/pd/'], error: null }];
    case 'publish-peers':
      return [{ kind: 'peers-published', version: effect.version, failed_hooks: [], error: null }];
    case 'drain':
      return [{ kind: 'drained', id: effect.resize, left: 0, error: null }];
    case 'release':
      return [{ kind: 'released', id: effect.resize, error: null }];
    case 'check-revision':
      return [{ kind: 'revision-checked', revision: effect.revision, round: effect.round, note: `passed on ${effect.urls.length}`, error: null }];
    case 'new-attempts':
      return [
        jobs(core, effect.jobs.map((j) => provisioned(j.job_num, j.attempt))),
        jobs(core, effect.jobs.flatMap((j) => [running(j.job_num, j.attempt), ready(j.job_num, j.attempt)])),
      ];
    default:
      return [];
  }
}

/** The effects answered as the shell and the nodes would (`answer` may answer otherwise), pass after pass; every effect seen, with the core it came from. */
export function play(core: RunCore, effects: Effect[], now: number, answer: (core: RunCore, e: Effect) => RunEvent[] = answersTo) {
  const seen: Array<{ core: RunCore; effect: Effect }> = [];
  let state = core;
  let pending = effects;
  for (let i = 0; i < 80 && pending.length > 0; i++) {
    seen.push(...pending.map((effect) => ({ core: state, effect })));
    const step = pass(state, pending.flatMap((e) => answer(state, e)), now + i);
    state = step.core;
    pending = step.effects;
  }
  return { core: state, seen };
}

/** A service's run with every replica provisioned, running and READY, and the gateways and nodes told. */
export function servingCore(plan: Plan): RunCore {
  let core = coreOf(plan);
  const all = plan.jobs.map((j) => j.job_num);
  const first = pass(core, [jobs(core, all.map((n) => provisioned(n))), { kind: 'unlocked' }, { kind: 'announced' }], T0 + 1000);
  core = play(first.core, first.effects, T0 + 1000).core;
  const up = pass(core, [jobs(core, all.flatMap((n) => [running(n), ready(n)]))], T0 + 2000);
  return play(up.core, up.effects, T0 + 2000).core;
}
