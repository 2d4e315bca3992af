import type { Backend, JobRef } from '../src/backends/backend';
import type { JobKey } from '../src/backends/job-usage';
import { workerMetrics } from '../src/metrics/troupe-metrics';
import type { JobEvent } from '../src/contract/messages';
import { sampleUsage } from './job-usage-sampler';
import type { RunJobsInput } from './types';

/** Each event of a batch as the worker's metrics count it (troupe_job_events_total). */
export function countJobEvents(backend: string, events: JobEvent[]): void {
  for (const e of events) {
    const event = e.kind === 'running' ? 'started' : e.kind === 'exited' ? (e.exit_code === 0 ? 'exited_ok' : 'exited_error') : e.kind;
    workerMetrics.jobEvents.inc({ backend, event });
  }
}

/**
 * A batch's running jobs in the worker's metrics while it supervises them: counted in
 * `troupe_jobs`, their usage sampled into the rings. `ended` takes one out; `stop` all.
 */
export function watchJobMetrics(target: Backend, input: RunJobsInput, running: JobRef[]): { ended: (jobNum: number) => void; stop: () => void } {
  const plans = new Map(input.jobs.map(({ plan_job }) => [plan_job.job_num, plan_job]));
  const live = new Map<number, { ref: JobRef; key: JobKey }>();
  for (const ref of running) {
    const plan = plans.get(ref.job_num);
    const key: JobKey = {
      run_name: input.run.run_name,
      group: plan?.node_group_name ?? '',
      rank: plan?.node_group_job_index ?? 0,
      job_num: ref.job_num,
      attempt: ref.attempt ?? 0,
      host: ref.instance.host,
    };
    live.set(ref.job_num, { ref, key });
  }
  const supervised = workerMetrics.jobsSupervised.labels({ backend: input.backend, state: 'running' });
  supervised.inc(live.size);
  const stopSampling = sampleUsage(target, input.backend, workerMetrics, () => [...live.values()]);
  return {
    ended: (jobNum) => {
      if (live.delete(jobNum)) supervised.dec();
    },
    stop: () => {
      stopSampling();
      supervised.dec(live.size);
      live.clear();
    },
  };
}
