import type { JobRef } from '../../src/backends/backend';
import type { Effect } from '../../src/run-core/effects';
import { endJob, isJobFinished } from '../../src/run-core/jobs';
import { teardownOf } from '../../src/run-core/outcome';
import { rootMessage } from '../failures';
import { teardownActivities } from '../node-group/node-group-activities';
import { jobRefOf } from './run-job-refs';
import { drainBeforeTeardown, removeRoutes } from './run-routes';
import { takeEvents } from './run-events';
import { setStatus, type Ending, type Run } from './run-context';

/** Every started process stopped, every machine released; the jobs still open end as the outcome says. */
export async function teardown(run: Run, outcome: Ending): Promise<void> {
  const { state, input } = run;
  state.status = 'TERMINATING';
  const { status, reason, graceful } = teardownOf(outcome);
  // Each node's current attempt (an earlier one was given back when it was replaced).
  const toStop: JobRef[] = state.jobs.flatMap((job) => (job.exit_code === null && !job.removed ? (jobRefOf(run, job) ?? []) : []));
  // A service's replicas leave the gateways and finish their requests first (not on an abort).
  if (graceful) await drainBeforeTeardown(run, () => takeEvents(run));
  try {
    if (toStop.length > 0) await teardownActivities.stopJobs({ backend: input.backend, jobs: toStop, grace_s: graceful ? input.options.stop_grace_s : 0 });
    await teardownActivities.releaseRun({ backend: input.backend, run_id: state.run_uid, submission: state.submission });
  } catch (err) {
    state.message = `${state.message ? `${state.message}; ` : ''}teardown incomplete: ${rootMessage(err)}`;
  }
  // A service's table goes last: until now it listed no replica, so requests got 503, not a dying one.
  await removeRoutes(run);
  const now = new Date().toISOString();
  for (const job of state.jobs) {
    if (!isJobFinished(job)) endJob(job, status, reason, null, now);
  }
}

/** The run's final status, reason and message, as the core decided them. */
export function finish(run: Run, effect: Extract<Effect, { kind: 'finish' }>): void {
  const { state } = run;
  state.finished_at = new Date().toISOString();
  state.termination_reason = effect.reason;
  state.message = effect.message;
  setStatus(run, effect.status);
}
