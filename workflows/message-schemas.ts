import { z } from 'zod';
import { InstanceSchema } from '../src/backends/backend';
import { PlanSchema, RetryPolicySchema } from '../src/plan/plan-schema';
import { JobTerminationReasonSchema } from './run-state-schema';

/**
 * What RunWorkflow takes and what a run and its groups tell each other, as zod schemas. Durations
 * are in seconds; every deadline is configurable per run. The messages themselves are in
 * workflows/messages.ts, which imports only these types: a workflow's modules are evaluated again
 * for every new workflow, and zod's are the largest. RunWorkflow loads this module when it checks
 * its input.
 */

export const RunOptionsSchema = z.object({
  /** How long a provisioned job may wait for its runner (WAITING_RUNNER_LIMIT_EXCEEDED past it). */
  runner_ready_timeout_s: z.number().positive().default(300),
  /** How long after job 0 has its address every other job may take to get one. */
  address_deadline_s: z.number().positive().default(600),
  /** One provisioning attempt's limit (no capacity is retried separately, while `retry` allows). */
  provision_attempt_timeout_s: z.number().positive().default(600),
  /** SIGTERM → SIGKILL grace when stopping jobs gracefully. */
  stop_grace_s: z.number().nonnegative().default(10),
  /** How often a watched job's process is checked. */
  watch_interval_ms: z.number().int().positive().default(250),
  /** First back-off before a resubmission; doubles each time, capped at 5 minutes. */
  retry_backoff_s: z.number().positive().default(5),
  /** Overrides the task's `retry` for this run (null: no retry; absent: the task's). */
  retry: RetryPolicySchema.nullable().optional(),
});
export type RunOptions = z.infer<typeof RunOptionsSchema>;
export type RunOptionsInput = z.input<typeof RunOptionsSchema>;

export const RunInputSchema = z.object({
  plan: PlanSchema,
  /** Name of the backend in the worker's registry: `local`, `ssh`, … */
  backend: z.string(),
  options: RunOptionsSchema,
  /** Keep the Troupe* search attributes current (only when the namespace has them registered). */
  search_attributes: z.boolean().default(false),
});
export type RunInput = z.infer<typeof RunInputSchema>;
export type RunInputArg = z.input<typeof RunInputSchema>;

/** Group child → run: what happened to one job. */
export const JobEventSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('provisioned'), job_num: z.number().int(), instance: InstanceSchema }),
  z.object({
    kind: z.literal('failed'),
    job_num: z.number().int(),
    reason: JobTerminationReasonSchema,
    message: z.string(),
    /** Which retry event this failure is (null: not retryable). */
    retry_event: z.enum(['no-capacity', 'interruption', 'error']).nullable(),
  }),
  z.object({ kind: z.literal('running'), job_num: z.number().int(), pid: z.number().int() }),
  z.object({ kind: z.literal('ready'), job_num: z.number().int() }),
  z.object({ kind: z.literal('exited'), job_num: z.number().int(), exit_code: z.number().int() }),
]);
export type JobEvent = z.infer<typeof JobEventSchema>;
export const AddressBookSchema = z.object({
  /** Internal address of every job, in job_num order. */
  job_ips: z.array(z.string()),
  /** GPUs of every job, in job_num order. */
  gpus_per_node: z.array(z.number().int().nonnegative()),
});
export type AddressBook = z.infer<typeof AddressBookSchema>;
