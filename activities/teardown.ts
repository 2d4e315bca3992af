import type { JobRef, JobStopFailure } from '../src/backends/backend';
import { mapLimit } from '../src/concurrency/map-limit';
import { backendFor } from './backend-lookup';
import { whileHeartbeating } from './heartbeat';
import type { BackendRegistry, ReleaseJobsInput, ReleaseRunInput, StopJobsInput } from './types';

/** Job attempts given back at once by one releaseJobs: a resize of many nodes must not open as many SSH commands at once. */
const RELEASES_IN_FLIGHT = 8;
/**
 * Jobs stopped at once by one stopJobs: a run's whole teardown stops every job, and a thousand
 * stops at once held a thousand files open. A stop mostly waits (for its processes to end), and
 * the local fleet's waiting stops share their scans, so many may wait together.
 */
const STOPS_IN_FLIGHT = 256;

/** Runs `act` on every job, `limit` at a time (heartbeating meanwhile); fails, naming each job, only if one failed. */
async function everyJob(jobs: JobRef[], what: string, limit: number, act: (job: JobRef) => Promise<void>): Promise<void> {
  const results = await whileHeartbeating(() => mapLimit(jobs, limit, (job) => act(job).then(() => null, (error: unknown) => ({ job, error }))));
  failIfAny(what, results.filter((r) => r !== null));
}

function failIfAny(what: string, failed: readonly JobStopFailure[]): void {
  if (failed.length > 0) throw new Error(`could not ${what} ${failed.map((f) => `${f.job.job_name}: ${String(f.error)}`).join('; ')}`);
}

export function createTeardownActivities(backends: BackendRegistry) {
  return {
    /** Stops every listed job's process group (all at once where the backend can, else STOPS_IN_FLIGHT at a time); fails only if one could not be stopped. */
    async stopJobs({ backend, jobs, grace_s }: StopJobsInput): Promise<void> {
      const target = backendFor(backends, backend);
      if (target.stopJobs) {
        const stopAll = target.stopJobs.bind(target);
        failIfAny('stop', await whileHeartbeating(() => stopAll(jobs, grace_s)));
      } else await everyJob(jobs, 'stop', STOPS_IN_FLIGHT, (job) => target.stopJob(job, grace_s));
    },

    /**
     * Gives back the machines of these job attempts alone (replaced or removed nodes; the rest of
     * the submission runs on), a few at a time; fails only if one could not be released.
     */
    async releaseJobs({ backend, jobs, grace_s }: ReleaseJobsInput): Promise<void> {
      const target = backendFor(backends, backend);
      await everyJob(jobs, 'release', RELEASES_IN_FLIGHT, (job) => target.releaseJob(job, grace_s));
    },

    /** Gives back every machine of the submission, including any the workflow never heard of. */
    async releaseRun({ backend, run_id, submission }: ReleaseRunInput): Promise<void> {
      await whileHeartbeating(() => backendFor(backends, backend).releaseRun(run_id, submission));
    },
  };
}
