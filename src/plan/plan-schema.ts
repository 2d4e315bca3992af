import { z } from 'zod';
import { scalesFromZero } from './scale-from-zero';
import { ResourcesSchema } from '../config/resources-schema';

/**
 * The plan: a task expanded into one global rank space. It is the input of RunWorkflow, so it is
 * plain JSON and validated again when a workflow receives it.
 */

export const StartupOrderSchema = z.enum(['any', 'master-first', 'workers-first']);
/** dstack's all-done and master-done (job 0 done); `group-done` (Troupe's extension): every node of `stop_group` done. */
export const StopCriteriaSchema = z.enum(['all-done', 'master-done', 'group-done']);
export const RetryEventSchema = z.enum(['no-capacity', 'interruption', 'error']);
export type RetryEvent = z.infer<typeof RetryEventSchema>;

export const RetryPolicySchema = z.object({
  on_events: z.array(RetryEventSchema),
  /** Seconds the run may keep being retried, counted from its submission. */
  duration_s: z.number().int().positive(),
});
export type RetryPolicy = z.infer<typeof RetryPolicySchema>;

export const PortMappingSchema = z.object({
  container_port: z.number().int(),
  local_port: z.number().int().nullable(),
});

/**
 * Troupe's extension: how to tell that a node of a group is ready (run on the node itself).
 * `http`: a GET answered 2xx; `tcp`: a connection accepted; `command`: exit status 0.
 */
export const ReadyProbeSchema = z.object({
  check: z.discriminatedUnion('kind', [
    z.object({
      kind: z.literal('http'),
      port: z.number().int().min(1).max(65535),
      path: z.string(),
      /** A service's probe may ask otherwise (absent: GET, no header, no body). */
      method: z.enum(['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD']).optional(),
      headers: z.array(z.object({ name: z.string(), value: z.string() })).optional(),
      body: z.string().nullable().optional(),
    }),
    z.object({ kind: z.literal('tcp'), port: z.number().int().min(1).max(65535) }),
    z.object({ kind: z.literal('command'), command: z.string() }),
  ]),
  /** Seconds between two probes of one node. */
  interval_s: z.number().positive(),
  /** Seconds after its commands start within which every node of the group must be ready. */
  timeout_s: z.number().positive(),
});
export type ReadyProbe = z.infer<typeof ReadyProbeSchema>;

/**
 * Troupe's extension: what happens when a node of the group fails while the run goes on.
 * `fail-run` (the default) fails the run as dstack does (its `retry` then applies to the whole
 * run); `restart-node` replaces the failed node with a fresh machine at the same global rank;
 * `restart-group` replaces every node of the group. At most `max_restarts` restarts of the group
 * within `within_s` seconds (null: over the whole run); one more fails the run.
 */
export const OnFailureSchema = z.object({
  action: z.enum(['fail-run', 'restart-node', 'restart-group']),
  max_restarts: z.number().int().nonnegative(),
  within_s: z.number().int().positive().nullable(),
});
export type OnFailure = z.infer<typeof OnFailureSchema>;

/** Troupe's extension: how many of a group's nodes must be READY before its dependents start. */
export const ReadyQuorumSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('count'), value: z.number().int().positive() }),
  z.object({ kind: z.literal('percent'), value: z.number().positive().max(100) }),
]);
export type ReadyQuorum = z.infer<typeof ReadyQuorumSchema>;

/** dstack's `rps`, and Troupe's extension `concurrency`: requests in flight per replica. */
export const ScalingMetricSchema = z.enum(['rps', 'concurrency']);

/** A service group's autoscaling (dstack's `scaling`, planned with its defaults). */
export const ScalingPlanSchema = z.object({
  /** dstack's `rps`, or Troupe's `concurrency` (requests in flight per replica). */
  metric: ScalingMetricSchema,
  /** Per replica, in the metric's unit: requests per second, or requests in flight. */
  target: z.number().positive(),
  window_s: z.number().int().positive(),
  scale_up_delay_s: z.number().int().nonnegative(),
  scale_down_delay_s: z.number().int().nonnegative(),
  /** Troupe's extension, for a group that scales from zero: how long the gateways hold a request while it wakes (absent: SCALE_FROM_ZERO_HOLD_S). */
  hold_s: z.number().int().min(1).max(900).optional(),
  /** Troupe's extension, for a group behind the router: its own traffic read from each replica's Prometheus endpoint; absent: the service's traffic through its entry groups (dstack's way). */
  replica_metrics: z
    .object({ port: z.number().int().min(1).max(65535), path: z.string(), requests: z.string().nullable(), inflight: z.string().nullable() })
    .nullable()
    .optional(),
});
export type ScalingPlan = z.infer<typeof ScalingPlanSchema>;

export const GroupPlanSchema = z.object({
  index: z.number().int().nonnegative(),
  name: z.string(),
  /** 0 only for a service's group that scales from zero (PlanSchema says where). */
  nodes: z.number().int().nonnegative(),
  resources: ResourcesSchema,
  commands: z.array(z.string()),
  ports: z.array(PortMappingSchema),
  /** Troupe's extension: indices of the groups whose every node must be READY before this one starts. */
  depends_on: z.array(z.number().int().nonnegative()).optional(),
  /** Troupe's extension: the readiness probe; without one a node is ready once its commands run. */
  ready: ReadyProbeSchema.nullable().optional(),
  /** Troupe's extension (`ready: {min: K}` or `{min: "50%"}`): dependents start once this many nodes are READY (absent: all). */
  ready_min: ReadyQuorumSchema.nullable().optional(),
  /** Troupe's extension (`nodes: MIN..MAX`): the bounds `troupe scale` may resize the group within; `nodes` is MIN at start. */
  nodes_range: z.object({ min: z.number().int().nonnegative(), max: z.number().int().positive() }).nullable().optional(),
  /** Troupe's extension: the group's failure policy (absent: fail-run). */
  on_failure: OnFailureSchema.nullable().optional(),
  /** Troupe's extension: when a group this one depends on restarts, keep this group's nodes running or restart them too. */
  on_dependency_restart: z.enum(['keep', 'restart']).optional(),
  /** Troupe's extension: a command run on each node of this group when the addresses of the groups it depends on change. */
  on_peers_change: z.string().nullable().optional(),
  /** A service group with a range of replicas: how the run resizes it from its traffic (autoscaling.ts). */
  scaling: ScalingPlanSchema.nullable().optional(),
});
export type GroupPlan = z.infer<typeof GroupPlanSchema>;

export const JobPlanSchema = z.object({
  job_num: z.number().int().nonnegative(),
  job_name: z.string(),
  node_group_index: z.number().int().nonnegative(),
  node_group_name: z.string(),
  node_group_job_index: z.number().int().nonnegative(),
  global_master: z.boolean(),
  group_master: z.boolean(),
  /** The group's commands, NOT yet interpolated: addresses are only known after provisioning. */
  commands: z.array(z.string()),
  ports: z.array(PortMappingSchema),
  /** 0 for a node's first machine; +1 each time Troupe replaces it (a restart) or reuses its rank (a resize). */
  attempt: z.number().int().nonnegative().optional(),
  /** A service's replica: the revision (hash) of the spec it runs, its TROUPE_REVISION. */
  revision: z.string().optional(),
});
export type JobPlan = z.infer<typeof JobPlanSchema>;

/** A service's rate limit after dstack's defaults (the gateway answers 429 past it). */
export const RateLimitPlanSchema = z.object({
  prefix: z.string(),
  rps: z.number().positive(),
  burst: z.number().int().nonnegative(),
  key: z.discriminatedUnion('type', [z.object({ type: z.literal('ip_address') }), z.object({ type: z.literal('header'), header: z.string() })]),
});

/** A service's revision (src/plan/revision.ts): 12 lowercase hex characters. */
export const RevisionSchema = z.string().regex(/^[0-9a-f]{12}$/);

/**
 * How a service's new revision replaces the old (Troupe's `rollout:`, issue 28), every default
 * filled in, durations in seconds:
 *
 *   { coherence: 'revision' | 'independent',
 *     max_surge: { kind: 'count', n } | { kind: 'percent', p },   // of each group's replicas
 *     steps: int >= 1,
 *     canary: { traffic_percent: 1..99, soak_s } | null,
 *     gates: { error_rate: 0..1, p95_factor: > 1, progress_deadline_s },
 *     rollback: 'auto' | 'manual',
 *     drain_timeout_s }
 *
 * `independent` (the default) is dstack's rolling update, each group on its own one replica at a
 * time: its plan has max_surge {count, 1}, steps 1, canary null and the default gates, whatever else
 * could be written (the config refuses the fields that mean nothing there).
 */
export const RolloutPlanSchema = z.object({
  coherence: z.enum(['revision', 'independent']),
  max_surge: z.discriminatedUnion('kind', [
    z.object({ kind: z.literal('count'), n: z.number().int().positive() }),
    z.object({ kind: z.literal('percent'), p: z.number().int().min(1).max(100) }),
  ]),
  steps: z.number().int().positive(),
  canary: z.object({ traffic_percent: z.number().min(1).max(99), soak_s: z.number().int().positive() }).nullable(),
  gates: z.object({
    error_rate: z.number().min(0).max(1),
    p95_factor: z.number().gt(1),
    progress_deadline_s: z.number().int().positive(),
  }),
  rollback: z.enum(['auto', 'manual']),
  drain_timeout_s: z.number().int().nonnegative(),
});
export type RolloutPlan = z.infer<typeof RolloutPlanSchema>;

/** What the run of a service pushes to the gateways besides its replicas (README: Services). */
/** A service's HTTP probe after dstack's defaults (the config's `probes`). */
export const ServiceProbeSchema = z.object({
  type: z.literal('http'),
  url: z.string(),
  method: z.enum(['get', 'post', 'put', 'delete', 'patch', 'head']),
  headers: z.array(z.object({ name: z.string(), value: z.string() })),
  body: z.string().nullable(),
  timeout_s: z.number().int().positive(),
  interval_s: z.number().int().positive(),
  ready_after: z.number().int().positive(),
  until_ready: z.boolean(),
});
export type ServiceProbe = z.infer<typeof ServiceProbeSchema>;

export const ServiceRunSchema = z.object({
  /** The hash of its groups' rolling fields: a new one means new replicas (scaling keeps it). */
  revision: RevisionSchema,
  /** The port every replica serves on. */
  port: z.number().int().min(1).max(65535),
  /** Hashes (SHA-256, hex) of the tokens that may call it; null: open to anyone (`auth: false`). */
  auth: z.object({ token_sha256: z.array(z.string().regex(/^[0-9a-f]{64}$/)).min(1) }).nullable(),
  strip_prefix: z.boolean(),
  rate_limits: z.array(RateLimitPlanSchema),
  /** The groups requests enter by: the router group where there is one, else every group. */
  entry: z.array(z.number().int().nonnegative()).min(1),
  /** How a new revision replaces this one (see RolloutPlanSchema). */
  rollout: RolloutPlanSchema,
  /** Its entry groups' probes: those with `until_ready: false` the gateways go on running after READY. */
  probes: z.array(ServiceProbeSchema).default([]),
});
export type ServiceRun = z.infer<typeof ServiceRunSchema>;

export const PlanSchema = z.object({
  run_name: z.string(),
  nodes_num: z.number().int().nonnegative(),
  image: z.string().nullable(),
  working_dir: z.string().nullable(),
  /** The task's env, resolved on the submitting side (bare `KEY` taken from its shell). */
  env: z.record(z.string(), z.string()),
  /** Names of env values that are secret (from the shell, or named like a token): sealed before submission. */
  secret_env: z.array(z.string()).optional(),
  startup_order: StartupOrderSchema,
  stop_criteria: StopCriteriaSchema,
  /** With `group-done`: the index of the group whose nodes, all done, end the run. */
  stop_group: z.number().int().nonnegative().optional(),
  retry: RetryPolicySchema.nullable(),
  max_duration_s: z.number().int().positive().nullable(),
  fleets: z.array(z.string()).nullable(),
  groups: z.array(GroupPlanSchema).min(1),
  jobs: z.array(JobPlanSchema),
  /** A service's run (`type: service`): what it pushes to the gateways. Absent for a task. */
  service: ServiceRunSchema.optional(),
}).superRefine((plan, ctx) => {
  // A group starts with no node only where the gateways hold requests while it wakes: a service's group that scales from zero.
  for (const group of plan.groups) {
    if (group.nodes > 0) continue;
    if (!scalesFromZero(plan, group)) ctx.addIssue({ code: 'custom', path: ['groups', group.index, 'nodes'], message: `group ${group.name} starts with no node: only a service's group that scales from zero (replicas: 0..N with scaling) may` });
  }
  if (plan.jobs.length === 0 && plan.groups.some((g) => g.nodes > 0)) ctx.addIssue({ code: 'custom', path: ['jobs'], message: 'a plan whose groups start with nodes needs their jobs' });
});
export type Plan = z.infer<typeof PlanSchema>;
