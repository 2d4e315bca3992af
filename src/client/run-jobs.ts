import { z } from 'zod';
import { JOBS_PAGE_MAX, type JobState, type RunState } from '../contract/run-state';
import { JobStateSchema } from '../contract/run-state-schema';
import { TroupeClientError } from './errors';

/**
 * The state with all its jobs. A large run answers its state query, and ends, without them
 * (`jobs_paged`: one payload may not pass 2 MB); they are read with `page` (the run's `runJobs`
 * query), in order, a page at a time.
 */
export async function withAllJobs(
  state: RunState,
  page: (offset: number, limit: number) => Promise<unknown>,
): Promise<RunState> {
  if (!state.jobs_paged) return state;
  const total = state.groups.reduce((sum, g) => sum + g.nodes, 0);
  const jobs: JobState[] = [];
  while (jobs.length < total) {
    const parsed = z.array(JobStateSchema).safeParse(await page(jobs.length, JOBS_PAGE_MAX));
    if (!parsed.success) {
      throw new TroupeClientError(`run ${state.run_name} returned jobs this client does not understand: ${parsed.error.message}`);
    }
    if (parsed.data.length === 0) throw new TroupeClientError(`run ${state.run_name} answered ${jobs.length} of its ${total} jobs, then none`);
    jobs.push(...parsed.data);
  }
  return { ...state, jobs, jobs_paged: false };
}
