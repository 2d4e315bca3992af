import type { Plan } from '../plan/plan-schema';
import type { JobState } from '../contract/run-state';
import { groupMembers } from './jobs';

/** Running, or already past running (a job that started and ended counts as started). */
function hasStarted(job: JobState): boolean {
  return job.running_at !== null;
}

/** READY: its probe passed, or (a group without `ready:`) its commands are running. */
export function isJobReady(plan: Plan, job: JobState): boolean {
  return plan.groups[job.group_index]?.ready ? job.ready_at !== null : hasStarted(job);
}

export function usesDependencies(plan: Plan): boolean {
  return plan.groups.some((g) => (g.depends_on ?? []).length > 0);
}

/** Per group: what it still waits for ("prefill (ready 0/1), decode (ready 1/3, needs 2)"), or null. */
export function dependencyWaits(plan: Plan, jobs: readonly JobState[]): (string | null)[] {
  return plan.groups.map((group) => {
    const deps = group.depends_on ?? [];
    const pending = deps.filter((d) => !groupReady(plan, jobs, d));
    if (pending.length === 0) return null;
    return deps
      .map((d) => {
        const members = groupMembers(jobs, d);
        const ready = members.filter((j) => isJobReady(plan, j)).length;
        const needed = quorumOf(plan, d, members.length);
        return `${plan.groups[d]?.name ?? d} (ready ${ready}/${members.length}${needed < members.length ? `, needs ${needed}` : ''})`;
      })
      .join(', ');
  });
}


/** How many of a group's `size` nodes must be READY for its dependents (`ready: {min}`; else all). */
export function quorumOf(plan: Plan, groupIndex: number, size: number): number {
  const min = plan.groups[groupIndex]?.ready_min;
  if (!min) return size;
  const needed = min.kind === 'count' ? min.value : Math.ceil((min.value * size) / 100);
  return Math.max(1, Math.min(size, needed));
}

function groupReady(plan: Plan, jobs: readonly JobState[], groupIndex: number): boolean {
  const members = groupMembers(jobs, groupIndex);
  return members.filter((j) => isJobReady(plan, j)).length >= quorumOf(plan, groupIndex, members.length);
}

/**
 * The jobs that may start now. With `depends_on` (Troupe's extension): a group starts when every
 * node of every group it depends on is READY. Otherwise dstack's `startup_order`: `any` all at
 * once; `master-first` job 0, then the others once it is running; `workers-first` every job but 0,
 * then job 0 once all of them are running.
 */
export function jobsAllowedToStart(plan: Plan, jobs: readonly JobState[]): number[] {
  if (usesDependencies(plan)) {
    const waits = dependencyWaits(plan, jobs);
    return jobs.filter((job) => !job.removed && waits[job.group_index] === null).map((job) => job.job_num);
  }
  const all = jobs.filter((job) => !job.removed).map((job) => job.job_num);
  const master = jobs[0];
  const workers = jobs.slice(1);
  switch (plan.startup_order) {
    case 'any':
      return all;
    case 'master-first':
      return master && hasStarted(master) ? all : [0];
    case 'workers-first':
      return workers.every(hasStarted) ? all : workers.map((job) => job.job_num);
  }
}

/**
 * Whether a new attempt (a restart, a resize) may start now as far as its own group goes, by
 * dstack's `startup_order` applied inside the group: `master-first` the group's master (its first
 * rank) first and the others once it is running; `workers-first` the others first and the master
 * once all of them are running; `any` (and a run ordered by `depends_on`) all together.
 */
export function startsInGroupOrder(plan: Plan, jobs: readonly JobState[], job: JobState): boolean {
  if (plan.startup_order === 'any') return true;
  const members = groupMembers(jobs, job.group_index);
  const master = members.reduce((first, j) => (j.group_job_index < first.group_job_index ? j : first), job);
  if (plan.startup_order === 'master-first') return job === master || hasStarted(master);
  return job !== master || members.every((j) => j === master || hasStarted(j));
}
