import { backendFor } from './backend-lookup';
import { whileHeartbeating } from './heartbeat';
import type { BackendRegistry, ReleaseRunInput, StopJobsInput } from './types';

export function createTeardownActivities(backends: BackendRegistry) {
  return {
    /** Stops every listed job's process group (all in parallel); fails only if one could not be stopped. */
    async stopJobs({ backend, jobs, grace_s }: StopJobsInput): Promise<void> {
      const target = backendFor(backends, backend);
      const results = await whileHeartbeating(() =>
        Promise.allSettled(jobs.map((job) => target.stopJob(job, grace_s))),
      );
      const failed = results.flatMap((r, i) => (r.status === 'rejected' ? [`${jobs[i]?.job_name}: ${String(r.reason)}`] : []));
      if (failed.length > 0) throw new Error(`could not stop ${failed.join('; ')}`);
    },

    /** Gives back every machine of the submission, including any the workflow never heard of. */
    async releaseRun({ backend, run_id, submission }: ReleaseRunInput): Promise<void> {
      await whileHeartbeating(() => backendFor(backends, backend).releaseRun(run_id, submission));
    },
  };
}
