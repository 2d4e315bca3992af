import type { JobState, RunState, RunStatus } from './run-state-schema';

/** What the run workflow does with its state: pure code, no zod (src/contract/run-state-schema.ts says why). */
export type {
  JobState,
  JobStatus,
  JobTerminationReason,
  RunState,
  RunStatus,
  RunTerminationReason,
  RolloutStatus,
} from './run-state-schema';

/** Past this much JSON the jobs are left out of the state's answers (Temporal warns above 512 KiB). */
export const JOBS_INLINE_MAX_BYTES = 512 * 1024;
/** The most jobs one `runJobs` answer holds (about 300 KiB). */
export const JOBS_PAGE_MAX = 500;

/** The state as a query or the result gives it: without the jobs when they would make it too large. */
export function answerOf(state: RunState): RunState {
  if (JSON.stringify(state.jobs).length <= JOBS_INLINE_MAX_BYTES) return state;
  return { ...state, jobs: [], jobs_paged: true };
}

/** One page of the jobs, `offset` first. */
export function jobsPage(state: RunState, offset: number, limit: number): JobState[] {
  const from = Math.max(0, Math.floor(offset));
  return state.jobs.slice(from, from + Math.max(0, Math.min(Math.floor(limit), JOBS_PAGE_MAX)));
}

export function isFinished(status: RunStatus): boolean {
  return status === 'TERMINATED' || status === 'FAILED' || status === 'DONE';
}
