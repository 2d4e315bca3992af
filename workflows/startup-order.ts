import type { Plan } from '../src/plan/plan-schema';
import type { JobState } from './run-state';

/** Running, or already past running (a job that started and ended counts as started). */
function hasStarted(job: JobState): boolean {
  return job.running_at !== null;
}

/**
 * The jobs that may start now, by dstack's `startup_order`: `any` all at once; `master-first` job 0,
 * then the others once it is running; `workers-first` every job but 0, then job 0 once all of them
 * are running.
 */
export function jobsAllowedToStart(order: Plan['startup_order'], jobs: readonly JobState[]): number[] {
  const all = jobs.map((job) => job.job_num);
  const master = jobs[0];
  const workers = jobs.slice(1);
  switch (order) {
    case 'any':
      return all;
    case 'master-first':
      return master && hasStarted(master) ? all : [0];
    case 'workers-first':
      return workers.every(hasStarted) ? all : workers.map((job) => job.job_num);
  }
}
