import { z } from 'zod';
import { ResourcesSchema } from '../config/resources-schema';
import { RouterTypeSchema, ScalingMetricSchema } from '../config/replica-groups';
import { GroupPlanSchema, RateLimitPlanSchema, RevisionSchema, RolloutPlanSchema, ScalingPlanSchema, ServiceProbeSchema, StartupOrderSchema } from './plan-schema';

/**
 * The plan of a service: its endpoint's settings and its replica groups after dstack's defaults.
 * Plain JSON, like the task plan; `troupe plan` shows it; service-run.ts makes the run's plan of it.
 */

export { ServiceProbeSchema, type ServiceProbe } from './plan-schema';

export { ScalingPlanSchema, type ScalingPlan } from './plan-schema';

export const ReplicaGroupPlanSchema = GroupPlanSchema.pick({
  index: true,
  name: true,
  resources: true,
  commands: true,
  depends_on: true,
  ready: true,
  ready_min: true,
  on_failure: true,
  on_dependency_restart: true,
  on_peers_change: true,
}).extend({
  /** Replicas at start (`min`) and at most (`max`). */
  replicas: z.object({ min: z.number().int().nonnegative(), max: z.number().int().nonnegative() }),
  scaling: ScalingPlanSchema.nullable(),
  router: RouterTypeSchema.nullable(),
  /** The group's image, else the service's; null: dstack's default image. */
  image: z.string().nullable(),
  resources: ResourcesSchema,
  /** The probes its replicas run (the service's `probes`, or the model's default probe). */
  probes: z.array(ServiceProbeSchema),
});
export type ReplicaGroupPlan = z.infer<typeof ReplicaGroupPlanSchema>;

export const ServicePlanSchema = z.object({
  run_name: z.string(),
  /** The hash of the groups' rolling fields (revision.ts): what a deployment compares to roll or not. */
  revision: RevisionSchema,
  /** The port the replicas listen on. */
  port: z.number().int().min(1).max(65535),
  auth: z.boolean(),
  strip_prefix: z.boolean(),
  model: z.object({ name: z.string(), prefix: z.string() }).nullable(),
  rate_limits: z.array(RateLimitPlanSchema),
  working_dir: z.string().nullable(),
  env: z.record(z.string(), z.string()),
  secret_env: z.array(z.string()),
  startup_order: StartupOrderSchema,
  fleets: z.array(z.string()).nullable(),
  /** The index of the group requests go to first, when one has `router`. */
  router_group: z.number().int().nonnegative().nullable(),
  groups: z.array(ReplicaGroupPlanSchema).min(1),
  /** Troupe's `rollout:` with its defaults (plan-schema.ts, RolloutPlanSchema). */
  rollout: RolloutPlanSchema,
});
export type ServicePlan = z.infer<typeof ServicePlanSchema>;
