import type { JobRef } from '../src/backends/backend';
import type { JobPlan } from '../src/plan/plan-schema';
import { inSpan } from '../src/tracing/tracing';

/**
 * A job's start as a span of the run's trace (a child of the activity's span), with what says
 * which job it is: run, group, rank, host. Names and numbers only, never env, commands or output.
 */
export async function traceJobStart<T>(runName: string, backend: string, ref: JobRef, plan: JobPlan, start: () => Promise<T>): Promise<T> {
  return await inSpan(
    `StartJob ${plan.node_group_name}/${plan.node_group_job_index}`,
    {
      'troupe.run': runName,
      'troupe.group': plan.node_group_name,
      'troupe.rank': plan.node_group_job_index,
      'troupe.job_num': ref.job_num,
      'troupe.attempt': ref.attempt ?? 0,
      'troupe.host': ref.instance.host,
      'troupe.backend': backend,
    },
    start,
  );
}
