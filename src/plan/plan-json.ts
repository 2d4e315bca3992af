import { z } from 'zod';
import { RangeSchema, type Resources } from '../config/resources-schema';
import { OnFailureSchema, PortMappingSchema, ReadyQuorumSchema, type GroupPlan, type Plan } from './plan-schema';

/**
 * The plan as `troupe plan --json` prints it: the fields dstack's own plan shows for a grouped
 * task, with resources after dstack's server-side defaults. Sizes are in GB; null means unbounded
 * or unset. Troupe's heal-and-scale extensions of a group appear only where the config sets them,
 * so a plain dstack task prints dstack's shape.
 */
export const PlanJsonSchema = z.object({
  run_name: z.string(),
  nodes_num: z.number().int(),
  groups: z.array(
    z.object({
      index: z.number().int(),
      name: z.string(),
      nodes: z.number().int(),
      resources: z.object({
        cpu: z.object({ arch: z.string().nullable(), count: RangeSchema }),
        memory: RangeSchema,
        disk: RangeSchema.nullable(),
        gpu: z.object({
          vendor: z.string().nullable(),
          name: z.array(z.string()).nullable(),
          count: RangeSchema,
          memory: RangeSchema.nullable(),
        }),
      }),
      nodes_range: z.object({ min: z.number().int(), max: z.number().int() }).optional(),
      ready_min: ReadyQuorumSchema.optional(),
      on_failure: OnFailureSchema.optional(),
      on_dependency_restart: z.literal('restart').optional(),
      on_peers_change: z.string().optional(),
    }),
  ),
  jobs: z.array(
    z.object({
      job_num: z.number().int(),
      job_name: z.string(),
      node_group_index: z.number().int(),
      node_group_name: z.string(),
      node_group_job_index: z.number().int(),
      global_master: z.boolean(),
      group_master: z.boolean(),
      commands: z.array(z.string()),
      ports: z.array(PortMappingSchema),
    }),
  ),
});
export type PlanJson = z.infer<typeof PlanJsonSchema>;

/** A group's resources as the plan's JSON shows them (and dstack's job requirements read). */
export function resourcesToJson(resources: Resources): PlanJson['groups'][number]['resources'] {
  return {
    cpu: { arch: resources.cpu.arch, count: { ...resources.cpu.count } },
    memory: { ...resources.memory },
    disk: resources.disk ? { ...resources.disk } : null,
    gpu: {
      vendor: resources.gpu.vendor,
      name: resources.gpu.name ? [...resources.gpu.name] : null,
      count: { ...resources.gpu.count },
      memory: resources.gpu.memory ? { ...resources.gpu.memory } : null,
    },
  };
}

export function planToJson(plan: Plan): PlanJson {
  return {
    run_name: plan.run_name,
    nodes_num: plan.nodes_num,
    groups: plan.groups.map((g) => ({
      index: g.index,
      name: g.name,
      nodes: g.nodes,
      resources: resourcesToJson(g.resources),
      ...healAndScaleJson(g),
    })),
    jobs: plan.jobs.map((j) => ({
      job_num: j.job_num,
      job_name: j.job_name,
      node_group_index: j.node_group_index,
      node_group_name: j.node_group_name,
      node_group_job_index: j.node_group_job_index,
      global_master: j.global_master,
      group_master: j.group_master,
      commands: [...j.commands],
      ports: j.ports.map((p) => ({ container_port: p.container_port, local_port: p.local_port })),
    })),
  };
}

/** The group's heal-and-scale settings that differ from the defaults (a fixed size, fail-run, keep, no hook). */
function healAndScaleJson(g: GroupPlan): Partial<PlanJson['groups'][number]> {
  return {
    ...(g.nodes_range ? { nodes_range: { ...g.nodes_range } } : {}),
    ...(g.ready_min ? { ready_min: { ...g.ready_min } } : {}),
    ...(g.on_failure ? { on_failure: { ...g.on_failure } } : {}),
    ...(g.on_dependency_restart === 'restart' ? { on_dependency_restart: 'restart' as const } : {}),
    ...(g.on_peers_change ? { on_peers_change: g.on_peers_change } : {}),
  };
}
