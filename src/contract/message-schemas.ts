import { z } from 'zod';
import { BackendCapabilitiesSchema, InstanceSchema, JobRefSchema } from '../backends/backend';
import { JobPlanSchema, PlanSchema, RetryEventSchema, RetryPolicySchema } from '../plan/plan-schema';
import { CarriedCoreSchema, PeersBookSchema } from './core-state-schema';
import { JobTerminationReasonSchema } from './run-state-schema';

/**
 * What RunWorkflow takes and what a run and its groups tell each other, as zod schemas. Durations
 * are in seconds; every deadline is configurable per run. The messages themselves are in
 * src/contract/messages.ts, which imports only these types: a workflow's modules are evaluated again
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
  /**
   * A run that heals or resizes lives as long as its service: once its history has this many
   * events it continues as new at its next quiet moment, its groups handed over to new children
   * that adopt the running jobs (README, "Groups that heal and scale"). The server's own
   * suggestion (at 4 Ki events by default) hands over too.
   */
  continue_as_new_after_events: z.number().int().min(100).default(4000),
});
export type RunOptions = z.infer<typeof RunOptionsSchema>;
export type RunOptionsInput = z.input<typeof RunOptionsSchema>;


export { PeersBookSchema, type PeersBook } from './core-state-schema';

/** Group child → run: what happened to one job. */
/**
 * Which machine of the rank an event is about (absent: 0). Events of an earlier attempt (a node
 * replaced by a restart, its old batch still reporting) are ignored by the run.
 */
const attempt = z.number().int().nonnegative().optional();

export const JobEventSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('provisioned'), job_num: z.number().int(), attempt, instance: InstanceSchema }),
  z.object({
    kind: z.literal('failed'),
    job_num: z.number().int(),
    attempt,
    reason: JobTerminationReasonSchema,
    message: z.string(),
    /** Which retry event this failure is (null: not retryable). */
    retry_event: z.enum(['no-capacity', 'interruption', 'error']).nullable(),
  }),
  z.object({ kind: z.literal('running'), job_num: z.number().int(), attempt, pid: z.number().int() }),
  z.object({ kind: z.literal('ready'), job_num: z.number().int(), attempt }),
  z.object({
    kind: z.literal('exited'),
    job_num: z.number().int(),
    attempt,
    exit_code: z.number().int(),
    /** Why, when the backend knows it (an OOM kill: "out of memory: limit 1 GiB"). */
    reason: z.string().optional(),
  }),
]);
export type JobEvent = z.infer<typeof JobEventSchema>;
export const AddressBookSchema = z.object({
  /** Internal address of every job, in job_num order. */
  job_ips: z.array(z.string()),
  /** GPUs of every job, in job_num order. */
  gpus_per_node: z.array(z.number().int().nonnegative()),
  /**
   * The group of every job, in job_num order (a resize appends ranks after every group, so ranks
   * need not be contiguous per group). Absent: contiguous, by the groups' sizes.
   */
  job_groups: z.array(z.number().int().nonnegative()).optional(),
  /** Ranks removed by a resize: no address of theirs is handed to a node. */
  removed: z.array(z.number().int().nonnegative()).optional(),
  /** The live address book at this point (peers.json), when the run keeps one. */
  peers: PeersBookSchema.optional(),
});
export type AddressBook = z.infer<typeof AddressBookSchema>;

/**
 * What a live run's execution hands to the next when it continues as new, at a quiet moment: no
 * restart, resize or delivery under way, every node running (and ready, with a probe). Its core
 * travels as it is (src/contract/core-state-schema.ts; the plan is the input's); beside it what the
 * workflow shell keeps. Maps and sets travel as arrays.
 */
export const CarriedRunSchema = z.object({
  /** The run's core, a stop asked while the groups were handed over included. */
  core: CarriedCoreSchema,
  /** 0 for the run's first execution, +1 at each hand-over: part of its group children's ids. */
  generation: z.number().int().positive(),
  capabilities: BackendCapabilitiesSchema,
  announced: AddressBookSchema.nullable(),
  /** Jobs already let start. */
  signalled: z.array(z.number().int()),
  live: z.object({
    /** Machines provisioned for attempts replaced meanwhile, still to give back. */
    unwanted: z.array(JobRefSchema),
  }),
});
export type CarriedRun = z.infer<typeof CarriedRunSchema>;

export const RunInputSchema = z.object({
  plan: PlanSchema,
  /** Name of the backend in the worker's registry: `local`, `ssh`, … */
  backend: z.string(),
  options: RunOptionsSchema,
  /** Keep the Troupe* search attributes current (only when the namespace has them registered). */
  search_attributes: z.boolean().default(false),
  /** What an earlier execution of this run hands over when it continues as new (absent: a new run). */
  carried: CarriedRunSchema.optional(),
});
export type RunInput = z.infer<typeof RunInputSchema>;
export type RunInputArg = z.input<typeof RunInputSchema>;
