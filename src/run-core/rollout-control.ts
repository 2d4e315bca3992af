import type { Plan } from '../plan/plan-schema';
import type { RolloutStatus } from '../contract/run-state';
import type { Effect } from './effects';
import type { RunEvent } from './events';
import { advanceCoherent, goOnAfterHold, rollBack } from './coherent-rollout';
import { deploymentRefusal, serviceOf, withService, withSpec } from './rollout-steps';
import type { RunCore } from './state';
import type { CoherentRollout } from '../contract/core-state-schema';

/**
 * A service's rollout steered by hand (the rolloutControl Update: `troupe rollout pause|resume|rollback`):
 * a coherent rollout paused where it is — no next step, its deadline and canary soak stopped —,
 * resumed, or rolled back while the old revision still serves; once one went through, a rollback
 * deploys the spec it replaced again, as a new deployment. What the run shows of its rollout
 * (`run.service.rollout`) is made here too. Pure: `now` comes in.
 */

export type RolloutAction = Extract<RunEvent, { kind: 'rollout-control' }>['action'];

/** Why the rollout cannot take `action` now, or null. */
export function rolloutControlRefusal(core: RunCore, action: RolloutAction, stopping: boolean): string | null {
  const name = core.plan.run_name;
  if (!core.service) return `run ${name} is not a service`;
  const rollout = core.service.rollout;
  const under = rollout && !rollout.over ? rollout : null;
  const coherent = under?.coherent ?? null;
  if (action === 'rollback' && !under) {
    if (!core.service.last_good) return `service ${name} has no rollout to roll back: none went through with rollout.coherence: revision`;
    return deploymentRefusal(core, stopping);
  }
  if (!under) return `service ${name} has no rollout under way`;
  if (!coherent) return `deployment ${under.number} of ${name} rolls as dstack does (rollout.coherence: independent): it cannot be paused or rolled back`;
  if (action === 'pause') return coherent.paused_at_ms !== null ? `deployment ${under.number} of ${name} is paused already` : coherent.phase === 'rolling-back' ? `deployment ${under.number} of ${name} is rolling back` : null;
  if (action === 'resume') return coherent.paused_at_ms === null ? `deployment ${under.number} of ${name} is not paused` : null;
  if (coherent.phase === 'rolling-back') return `deployment ${under.number} of ${name} is rolling back already`;
  // A round but the last retires some of the old revision while it is still current: it can come back.
  if (coherent.phase === 'retiring' && core.service.current_revision === coherent.revision) {
    return `deployment ${under.number} of ${name} serves every request and its old revision is being stopped: once it is over, \`troupe rollout rollback\` deploys the old one again`;
  }
  return null;
}

/**
 * An apply, while a rollout by revision is under way, of the spec it replaces (the serving revision's):
 * a revert, taken as a rollback by hand — the old revision still serves, so nothing new is started.
 */
export function revertOf(core: RunCore, plan: Pick<Plan, 'service'> | null | undefined): string | null {
  const rollout = core.service?.rollout;
  const coherent = rollout?.coherent;
  if (!rollout || rollout.over || !coherent || plan?.service?.revision !== coherent.undo.service.revision) return null;
  return `reverted by an apply of revision ${coherent.from}'s spec`;
}

/** The rolloutControl event, once accepted: the rollout paused, resumed or turned back (`why`: a revert's words instead of "by hand"). */
export function steerRollout(core: RunCore, action: RolloutAction, now: number, effects: Effect[], why = 'rolled back by hand'): RunCore {
  const service = serviceOf(core);
  const rollout = service.rollout;
  const coherent = rollout?.coherent;
  if (!rollout || rollout.over || !coherent) return core;
  if (action === 'pause') return withService(core, { ...service, rollout: { ...rollout, coherent: { ...coherent, paused_at_ms: now } } });
  if (action === 'resume' && coherent.cause !== null) {
    // Held for a decision (rollback: manual): the user says go on.
    const progress = core.plan.service?.rollout.gates.progress_deadline_s ?? 600;
    return advanceCoherent(withService(core, { ...service, rollout: { ...rollout, coherent: goOnAfterHold(coherent, now, progress) } }), now, effects);
  }
  if (action === 'resume') {
    // The clocks go on from where they stopped.
    const paused = now - (coherent.paused_at_ms ?? now);
    const since = coherent.canary.since_ms === null ? null : coherent.canary.since_ms + paused;
    const resumed = { ...coherent, paused_at_ms: null, deadline_ms: coherent.deadline_ms + paused, canary: { ...coherent.canary, since_ms: since } };
    return advanceCoherent(withService(core, { ...service, rollout: { ...rollout, coherent: resumed } }), now, effects);
  }
  // Held for a decision (rollback: manual): the reason it was held comes first.
  const cause = coherent.cause === null ? why : `${coherent.cause}; ${why}`;
  return advanceCoherent(rollBack(core, { ...coherent, paused_at_ms: null }, cause), now, effects);
}

/** The plan that deploys the last good spec again: the running plan with its service settings and groups' commands and sizes. */
export function lastGoodPlan(core: RunCore): Plan | null {
  const spec = core.service?.last_good;
  return spec ? withSpec(core.plan, spec) : null;
}

/** Gate A in words: `round 2: under way`, `round 1: passed: …`, `round 1: failed: …`; null: not asked. */
function syntheticText(gate: CoherentRollout['synthetic']): string | null {
  if (!gate) return null;
  if (gate.state === 'passed') return `round ${gate.round}: ${gate.note ?? 'passed'}`;
  return gate.note === null ? `round ${gate.round}: a synthetic request to each new entry replica, under way` : `round ${gate.round}: failed: ${gate.note}`;
}

/** The rollout as `troupe rollout status` shows it (null: none since the run began). */
export function rolloutStatusOf(core: RunCore): RolloutStatus | null {
  const service = core.service;
  const rollout = service?.rollout;
  const shown = core.run.service?.rollout ?? null;
  if (!service) return null;
  const can_roll_back = service.last_good !== null;
  // Forgotten once answered: the last one shown stays, as it ended.
  if (!rollout) return shown ? { ...shown, can_roll_back } : null;
  const coherent = rollout.coherent;
  const percent = coherent?.canary.traffic_percent ?? null;
  return {
    deployment: rollout.number,
    coherence: coherent ? 'revision' : 'independent',
    revision: coherent ? coherent.revision : rollout.number,
    from: coherent ? coherent.from : null,
    phase: rollout.over ? 'over' : coherent ? coherent.phase : 'rolling',
    paused: coherent?.paused_at_ms != null && !rollout.over,
    held: coherent && coherent.phase !== 'rolling-back' && !rollout.over ? coherent.cause : null,
    canary: coherent && percent !== null ? { traffic_percent: percent, gate: coherent.canary.gate } : null,
    round: coherent && coherent.rounds > 1 ? { number: coherent.round, of: coherent.rounds } : null,
    share_percent: rollout.over ? null : (coherent?.share_percent ?? null),
    synthetic: syntheticText(coherent?.synthetic ?? null),
    error: rollout.error,
    can_roll_back,
  };
}
