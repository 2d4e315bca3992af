import { z } from 'zod';
import { InstanceSchema } from '../backends/backend';

/**
 * The run's state as the SDK, the CLI and the Web UI see it (the `runState` query and the result),
 * as zod schemas that the client checks answers with. Statuses and reasons use dstack's names, so
 * what users know carries over. Workflow code imports only the types (src/contract/run-state.ts): a
 * workflow's modules are evaluated again for every new workflow, and zod's are the largest.
 */

export const RunStatusSchema = z.enum([
  'PENDING', 'SUBMITTED', 'PROVISIONING', 'RUNNING', 'TERMINATING', 'TERMINATED', 'FAILED', 'DONE',
]);
export type RunStatus = z.infer<typeof RunStatusSchema>;

export const RunTerminationReasonSchema = z.enum([
  'ALL_JOBS_DONE', 'JOB_FAILED', 'RETRY_LIMIT_EXCEEDED', 'STOPPED_BY_USER', 'ABORTED_BY_USER', 'SERVER_ERROR',
]);
export type RunTerminationReason = z.infer<typeof RunTerminationReasonSchema>;

export const JobStatusSchema = z.enum([
  'SUBMITTED', 'PROVISIONING', 'PULLING', 'RUNNING', 'READY', 'TERMINATING', 'TERMINATED', 'ABORTED', 'FAILED', 'DONE',
]);
export type JobStatus = z.infer<typeof JobStatusSchema>;

export const JobTerminationReasonSchema = z.enum([
  'FAILED_TO_START_DUE_TO_NO_CAPACITY',
  'WAITING_RUNNER_LIMIT_EXCEEDED',
  'WAITING_ADDRESSES_LIMIT_EXCEEDED',
  'WAITING_READY_LIMIT_EXCEEDED',
  'INSTANCE_UNREACHABLE',
  'CONTAINER_EXITED_WITH_ERROR',
  'EXECUTOR_ERROR',
  'MAX_DURATION_EXCEEDED',
  'TERMINATED_BY_SERVER',
  'TERMINATED_BY_USER',
  'ABORTED_BY_USER',
  'DONE_BY_RUNNER',
]);
export type JobTerminationReason = z.infer<typeof JobTerminationReasonSchema>;

/** A node's earlier machine: what it was and how it ended (kept for `troupe logs --attempt` and `troupe ps`). */
export const JobAttemptSchema = z.object({
  attempt: z.number().int().nonnegative(),
  instance: InstanceSchema.nullable(),
  status: z.string(),
  termination_reason: z.string().nullable(),
  message: z.string().nullable(),
  exit_code: z.number().int().nullable(),
  running_at: z.string().nullable(),
  finished_at: z.string().nullable(),
});
export type JobAttempt = z.infer<typeof JobAttemptSchema>;

export const JobStateSchema = z.object({
  job_num: z.number().int(),
  job_name: z.string(),
  group_index: z.number().int(),
  group_name: z.string(),
  group_job_index: z.number().int(),
  status: JobStatusSchema,
  termination_reason: JobTerminationReasonSchema.nullable(),
  message: z.string().nullable(),
  instance: InstanceSchema.nullable(),
  pid: z.number().int().nullable(),
  exit_code: z.number().int().nullable(),
  /** ISO timestamps (workflow time). */
  submitted_at: z.string(),
  provisioned_at: z.string().nullable(),
  running_at: z.string().nullable(),
  /** When its readiness probe first passed (groups with `ready:`). */
  ready_at: z.string().nullable().default(null),
  finished_at: z.string().nullable(),
  /** Which machine of this rank this is: 0 first, +1 per restart (or per reuse of the rank by a resize). */
  attempt: z.number().int().nonnegative().default(0),
  /** Times Troupe replaced this node after a failure (its group's `on_failure`). */
  restarts: z.number().int().nonnegative().default(0),
  /** Removed by a resize (`troupe scale`): its rank is no longer part of the run. */
  removed: z.boolean().default(false),
  /** A service replica's revision: the deployment that started it (0: as submitted); null for a task's node. */
  revision: z.number().int().nonnegative().nullable().default(null),
  /** The node's earlier attempts, oldest first (the last 10). */
  previous_attempts: z.array(JobAttemptSchema).default([]),
});
export type JobState = z.infer<typeof JobStateSchema>;

/** A service's rollout as `troupe rollout status` and `troupe ps` show it. */
export const RolloutStatusSchema = z.object({
  /** The deployment it is. */
  deployment: z.number().int().nonnegative(),
  coherence: z.enum(['revision', 'independent']),
  /** Its new revision, and the one serving before it (null: dstack's rolling, one pool). */
  revision: z.number().int().nonnegative(),
  from: z.number().int().nonnegative().nullable(),
  /** Where it is: a coherent rollout's phase, `rolling` (dstack's), or `over`. */
  phase: z.enum(['starting', 'canary', 'shifting', 'retiring', 'rolling-back', 'rolling', 'over']),
  paused: z.boolean(),
  /** A canary's share of new requests and its gate's last verdict. */
  canary: z.object({ traffic_percent: z.number(), gate: z.string().nullable() }).nullable(),
  /** The round under way of a rollout in rounds (rollout.steps, max_surge), or null: one round. */
  round: z.object({ number: z.number().int().positive(), of: z.number().int().positive() }).nullable().default(null),
  /** Why a rollout with `rollback: manual` is held for a decision (paused, the new revision given no new requests), or null. */
  held: z.string().nullable().default(null),
  /** The new revision's share of new requests now (percent) while the old one is current, or null. */
  share_percent: z.number().nullable().default(null),
  /** Gate A of the round: its synthetic request to each new entry replica under way, passed or failed, in words; null: not asked yet. */
  synthetic: z.string().nullable().default(null),
  /** Why it stopped or was rolled back (null: it went through, or goes on). */
  error: z.string().nullable(),
  /** A revision to go back to with `troupe rollout rollback` once it is over. */
  can_roll_back: z.boolean(),
});
export type RolloutStatus = z.infer<typeof RolloutStatusSchema>;

export const RunStateSchema = z.object({
  run_name: z.string(),
  /** The workflow id (`run/<name>`). */
  run_id: z.string(),
  /** Temporal's first execution run id: DSTACK_RUN_ID on the nodes. */
  run_uid: z.string(),
  backend: z.string(),
  status: RunStatusSchema,
  termination_reason: RunTerminationReasonSchema.nullable(),
  message: z.string().nullable(),
  /** 0 for the first submission; +1 for each resubmission by `retry`. */
  submission: z.number().int(),
  submitted_at: z.string(),
  finished_at: z.string().nullable(),
  groups: z.array(
    z.object({
      index: z.number().int(),
      name: z.string(),
      nodes: z.number().int(),
      /** What the group waits for before it may start, e.g. "prefill (ready 0/1), decode (ready 1/1)". */
      waiting_for: z.string().nullable().default(null),
      /** `nodes: MIN..MAX`: the bounds of `troupe scale` (null: a fixed size). */
      nodes_range: z.object({ min: z.number().int(), max: z.number().int() }).nullable().default(null),
      /** Restarts of the group's nodes so far (its `on_failure`). */
      restarts: z.number().int().nonnegative().default(0),
    }),
  ),
  jobs: z.array(JobStateSchema),
  /**
   * True when the jobs were too many for one answer (a payload has a 2 MB limit): `jobs` is then
   * empty, and the jobs are read a page at a time with the `runJobs` query (the SDK does it).
   */
  jobs_paged: z.boolean().default(false),
  /** Version of the live address book on the nodes (peers.json); 0 before the first. */
  peers_version: z.number().int().nonnegative().default(0),
  /**
   * A service's: where users call it (each gateway's endpoints, none before its first table is on
   * them), whether calls need its token, and the generation of its routing table there. Null for a task.
   */
  service: z
    .object({
      endpoints: z.array(z.string()),
      auth: z.boolean(),
      table_generation: z.number().int().nonnegative(),
      /** The deployment running: 0 as submitted, +1 per `troupe apply` of a changed service (dstack's deployment=N). */
      deployment: z.number().int().nonnegative().default(0),
      /** The last rollout, under way or over (null: none since the run began). */
      rollout: RolloutStatusSchema.nullable().default(null),
    })
    .nullable()
    .default(null),
});
export type RunState = z.infer<typeof RunStateSchema>;
