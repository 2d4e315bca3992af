import type { Plan } from '../src/plan/plan-schema';
import type { JobState } from './run-state';

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

/** Per group: what it still waits for ("prefill (ready 0/1), decode (ready 1/1)"), or null. */
export function dependencyWaits(plan: Plan, jobs: readonly JobState[]): (string | null)[] {
  return plan.groups.map((group) => {
    const deps = group.depends_on ?? [];
    const pending = deps.filter((d) => !groupReady(plan, jobs, d));
    if (pending.length === 0) return null;
    return deps
      .map((d) => {
        const members = jobs.filter((j) => j.group_index === d);
        const ready = members.filter((j) => isJobReady(plan, j)).length;
        return `${plan.groups[d]?.name ?? d} (ready ${ready}/${members.length})`;
      })
      .join(', ');
  });
}

function groupReady(plan: Plan, jobs: readonly JobState[], groupIndex: number): boolean {
  return jobs.filter((j) => j.group_index === groupIndex).every((j) => isJobReady(plan, j));
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
    return jobs.filter((job) => waits[job.group_index] === null).map((job) => job.job_num);
  }
  const all = jobs.map((job) => job.job_num);
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
