import type { JobRef } from '../src/backends/backend';
import { Slots } from '../src/concurrency/slots';
import { backendFor } from './backend-lookup';
import { whileHeartbeating } from './heartbeat';
import type { BackendRegistry, ReleaseJobsInput, ReleaseRunInput, StopJobsInput } from './types';

/** Job attempts given back at once by one releaseJobs: a resize of many nodes must not open as many SSH commands at once. */
const RELEASES_IN_FLIGHT = 8;

/** Runs `act` on every job (heartbeating meanwhile); fails, naming each job, only if one failed. */
async function everyJob(jobs: JobRef[], what: string, act: (job: JobRef) => Promise<void>): Promise<void> {
  const results = await whileHeartbeating(() => Promise.allSettled(jobs.map(act)));
  const failed = results.flatMap((r, i) => (r.status === 'rejected' ? [`${jobs[i]?.job_name}: ${String(r.reason)}`] : []));
  if (failed.length > 0) throw new Error(`could not ${what} ${failed.join('; ')}`);
}

export function createTeardownActivities(backends: BackendRegistry) {
  return {
    /** Stops every listed job's process group (all in parallel); fails only if one could not be stopped. */
    async stopJobs({ backend, jobs, grace_s }: StopJobsInput): Promise<void> {
      const target = backendFor(backends, backend);
      await everyJob(jobs, 'stop', (job) => target.stopJob(job, grace_s));
    },

    /**
     * Gives back the machines of these job attempts alone (replaced or removed nodes; the rest of
     * the submission runs on), a few at a time; fails only if one could not be released.
     */
    async releaseJobs({ backend, jobs, grace_s }: ReleaseJobsInput): Promise<void> {
      const target = backendFor(backends, backend);
      const slots = new Slots(RELEASES_IN_FLIGHT);
      await everyJob(jobs, 'release', (job) => slots.with(() => target.releaseJob(job, grace_s)));
    },

    /** Gives back every machine of the submission, including any the workflow never heard of. */
    async releaseRun({ backend, run_id, submission }: ReleaseRunInput): Promise<void> {
      await whileHeartbeating(() => backendFor(backends, backend).releaseRun(run_id, submission));
    },
  };
}
