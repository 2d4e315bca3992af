import type { RolloutStatus } from '../../client';

/**
 * A service's rollout in words (`troupe rollout`, and its service row in `troupe ps`), from the
 * run's state alone (`service.rollout`).
 */

type Phase = RolloutStatus['phase'];

/** Phases in which the old revision still serves every request it served, so a rollback leaves users untouched. */
const OLD_SERVES: ReadonlySet<Phase> = new Set(['starting', 'canary', 'shifting']);

/** `canary 20%`, `shifting`, `…, paused`: where a rollout under way is. */
function whereItIs(rollout: RolloutStatus): string {
  const share = rollout.share_percent ?? rollout.canary?.traffic_percent;
  // The canary takes the first round's share; later rounds' shares are the new revision's part so far.
  const canary = rollout.canary !== null && (rollout.round?.number ?? 1) === 1;
  const named = rollout.phase === 'canary' && share !== undefined ? `${canary ? 'canary' : 'sharing'} ${share}%` : rollout.phase;
  const phase = rollout.round ? `round ${rollout.round.number} of ${rollout.round.of}: ${named}` : named;
  if (rollout.held) return `${phase}, held: ${rollout.held} (\`troupe rollout rollback\` or \`resume\`)`;
  return rollout.paused ? `${phase}, paused` : phase;
}

/** `rollout 3: canary 20% (gate: …)`: what `troupe ps` says of a rollout under way; '' when none is. */
export function rolloutUnderWay(rollout: RolloutStatus | null): string {
  if (!rollout || rollout.phase === 'over') return '';
  const gate = rollout.phase === 'canary' && rollout.canary?.gate ? ` (gate: ${rollout.canary.gate})` : '';
  return `rollout ${rollout.deployment}: ${whereItIs(rollout)}${gate}`;
}

/** Whether `troupe rollout rollback` may go back now, and what it would do. */
function rollbackText(run: string, rollout: RolloutStatus): string {
  if (rollout.phase === 'over') {
    return rollout.can_roll_back
      ? `possible: \`troupe rollout rollback ${run}\` deploys the spec the last rollout that went through replaced again`
      : 'none to go back to (no rollout with coherence: revision went through)';
  }
  if (rollout.coherence === 'independent') return 'not possible: it rolls as dstack does (rollout.coherence: independent)';
  if (rollout.phase === 'rolling-back') return 'rolling back';
  // A round but the last retires part of the old revision while it is still current: it can come back.
  const roundLeft = rollout.round !== null && rollout.round.number < rollout.round.of;
  if (rollout.phase === 'retiring' && roundLeft) return `possible: \`troupe rollout rollback ${run}\` (the old revision is still current; its retired replicas start again)`;
  if (rollout.phase === 'retiring') return 'not now: the old revision is being stopped; once it is over, a rollback deploys it again';
  return OLD_SERVES.has(rollout.phase) ? `possible: \`troupe rollout rollback ${run}\` (the old revision serves throughout)` : 'not possible';
}

/** `troupe rollout status`: the rollout in a few lines, or that there has been none. */
export function describeRollout(run: string, rollout: RolloutStatus | null): string[] {
  if (!rollout) return [`${run}: no rollout since the run began`];
  const revision = rollout.from === null ? 'one pool, old and new replicas side by side (dstack\'s rolling)' : `${rollout.from} → ${rollout.revision}`;
  const phase = rollout.phase === 'over' ? (rollout.error ? 'over, did not go through' : 'over, went through') : whereItIs(rollout);
  const canary = rollout.canary ? [`  canary:   ${rollout.canary.traffic_percent}% of new requests; gate: ${rollout.canary.gate ?? 'no verdict yet'}`] : [];
  return [
    `${run}: deployment ${rollout.deployment} (coherence: ${rollout.coherence})`,
    `  revision: ${revision}`,
    `  phase:    ${phase}`,
    ...(rollout.synthetic ? [`  gate A:   ${rollout.synthetic}`] : []),
    ...canary,
    ...(rollout.error ? [`  error:    ${rollout.error}`] : []),
    `  rollback: ${rollbackText(run, rollout)}`,
  ];
}

/** How a rollback ended, in one line (`troupe rollout rollback`). */
export function describeRollbackEnd(run: string, rollout: RolloutStatus | null): string {
  if (!rollout) return `${run}: rolled back`;
  if (rollout.error) return `${run}: ${rollout.error}`;
  return `${run}: deployment ${rollout.deployment} went through; revision ${rollout.revision} serves`;
}
