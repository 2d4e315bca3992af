import type { JobState } from '../contract/run-state';
import type { Plan } from '../plan/plan-schema';
import type { RunCore } from './state';

/**
 * A service's revisions: every replica belongs to one (the deployment that started it: 0 as
 * submitted, N for the N-th `troupe apply` that rolled), its hash given to it as TROUPE_REVISION.
 * With `rollout.coherence: revision` (Troupe's extension) the revisions are kept apart: a replica's
 * peers file, `${{ … }}` values and `on_peers_change` see only replicas of its own revision, and the
 * gateways keep one pool per revision, so a request never crosses revisions. Without it (dstack's
 * rolling) all replicas are one pool. Pure.
 */

/** True when the service keeps its revisions apart. */
export function keepsRevisionsApart(plan: Plan): boolean {
  return plan.service?.rollout?.coherence === 'revision';
}

/** The revision a rank's current replica belongs to. */
/**
 * A replica of the new revision of a rollout by revision under way (rolling back too): its failure
 * past what its group heals turns the rollout back, or only takes it out, instead of failing the
 * service (coherent-rollout.ts: failedNew).
 */
export function ofRevisionRolling(core: RunCore, jobNum: number): boolean {
  const rollout = core.service?.rollout;
  const coherent = rollout?.coherent;
  return !!coherent && !rollout?.over && revisionOf(core, jobNum) === coherent.revision;
}

export function revisionOf(core: RunCore, jobNum: number): number {
  return core.service?.revision_of[jobNum] ?? 0;
}

/** The revision new requests go to. */
export function servingRevision(core: RunCore): number {
  return core.service?.current_revision ?? 0;
}

/**
 * Which ranks a replica of revision `revision` sees, or null when the run keeps no revisions apart
 * (a task, or a service with dstack's rolling): every rank then.
 */
export function sees(core: RunCore, revision: number | null): ((job: JobState) => boolean) | null {
  if (revision === null || !keepsRevisionsApart(core.plan)) return null;
  return (job) => revisionOf(core, job.job_num) === revision;
}

/** The revision whose view a rank gets: its own when revisions are kept apart, else null (the whole run). */
export function viewOf(core: RunCore, jobNum: number): number | null {
  return keepsRevisionsApart(core.plan) ? revisionOf(core, jobNum) : null;
}

/** `jobs` split by the view each gets, in the order met. */
export function byView<J extends { job_num: number }>(core: RunCore, jobs: readonly J[]): Array<{ revision: number | null; jobs: J[] }> {
  const out = new Map<number | null, J[]>();
  for (const job of jobs) {
    const view = viewOf(core, job.job_num);
    const list = out.get(view) ?? [];
    list.push(job);
    out.set(view, list);
  }
  return [...out.entries()].map(([revision, list]) => ({ revision, jobs: list }));
}

/** The share of new requests (percent) a rollout's new revision takes now while the old one is current (its canary, or a round's share), or null (none). */
export function canaryShare(core: RunCore): { revision: number; percent: number } | null {
  const coherent = core.service?.rollout?.coherent;
  const percent = coherent?.share_percent ?? null;
  if (!coherent || percent === null || core.service?.rollout?.over || servingRevision(core) === coherent.revision) return null;
  return { revision: coherent.revision, percent };
}
