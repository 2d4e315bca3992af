import type { JobState, RolloutStatus } from '../contract/run-state';
import { activeJobs, groupMembers, isJobFinished } from './jobs';
import { isJobReady } from './startup-order';
import type { RunCore } from './state';

/**
 * What the Temporal Web UI shows as the run's "current details" (markdown, kept current by the run's
 * loop): its status, each group's nodes READY of its size, and for a service its deployment, its
 * rollout under way or last (phase, round, the new revision's share, the canary gate's verdict, why it
 * was rolled back) with the steps it went through, and each autoscaled group's last verdict. Pure.
 */

/** The rollout in one line: its phase, round and share (and with `gate`, the canary gate's last verdict, which changes at each reading); null: none yet. */
export function rolloutLine(rollout: RolloutStatus | null, gate = false): string | null {
  if (!rollout) return null;
  const round = rollout.round ? `round ${rollout.round.number} of ${rollout.round.of}: ` : '';
  const share = rollout.share_percent !== null && rollout.phase !== 'over' ? `, new revision at ${rollout.share_percent}%` : '';
  const gateA = gate && rollout.phase === 'starting' && rollout.synthetic ? ` (gate A: ${rollout.synthetic})` : '';
  const verdict = gate && rollout.canary?.gate ? ` (gate: ${rollout.canary.gate})` : gateA;
  const paused = rollout.held ? `, held: ${rollout.held}` : rollout.paused ? ', paused' : '';
  if (rollout.phase === 'over') return `deployment ${rollout.deployment} over: ${rollout.error ?? 'went through'}`;
  return `deployment ${rollout.deployment} ${round}${rollout.phase}${share}${paused}${verdict}`;
}

/** The markdown; `steps`: the rollout's lines as they changed, oldest first (the loop keeps them). */
export function runDetails(core: RunCore, steps: readonly string[]): string {
  const { run, plan } = core;
  const active = activeJobs(run);
  // READY with a probe, running without one: what start-up order counts as ready (startup-order.ts).
  const up = (jobs: JobState[]) => jobs.filter((j) => !isJobFinished(j) && isJobReady(plan, j)).length;
  const ready = up(active);
  const lines = [`**${run.status}** · ${ready} of ${active.length} node${active.length === 1 ? '' : 's'} ready${run.message ? ` · ${run.message}` : ''}`, ''];
  lines.push('| group | ready / nodes |', '|---|---|');
  for (const group of plan.groups) {
    const members = groupMembers(run.jobs, group.index);

    const range = group.nodes_range ? ` (${group.nodes_range.min}..${group.nodes_range.max})` : '';
    lines.push(`| ${group.name} | ${up(members)} / ${members.length}${range} |`);
  }
  const service = run.service;
  if (!service || !core.service) return lines.join('\n');
  lines.push('', `**Service** · deployment ${service.deployment} · revision ${core.service.current_revision} serves${service.endpoints[0] ? ` · ${service.endpoints[0]}` : ''}`);
  const rollout = rolloutLine(service.rollout, true);
  if (rollout) lines.push('', `**Rollout**: ${rollout}`, ...steps.map((s) => `- ${s}`));
  const auto = core.service.autoscale;
  const verdicts = plan.groups.flatMap((group) => {
    const last = auto.last[group.index];
    if (!group.scaling || !last) return [];
    const unit = group.scaling.metric === 'rps' ? 'rps' : 'in flight';
    const own = group.scaling.replica_metrics ? ", its replicas' own" : '';
    return [`- ${group.name}: ${Math.round(last.value * 10) / 10} ${unit}${own} (target ${group.scaling.target} per replica)${last.held ? `, ${last.held} held waking it from zero` : ''} → ${last.wanted} wanted`];
  });
  if (verdicts.length > 0 || auto.problem) lines.push('', '**Autoscaling**', ...verdicts, ...(auto.problem ? [`- ${auto.problem}`] : []));
  return lines.join('\n');
}
