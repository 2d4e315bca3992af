import { z } from 'zod';
import { RangeSchema } from '../config/resources-schema';
import { PortMappingSchema, type Plan } from './plan-schema';

/**
 * The plan as `troupe plan --json` prints it: the fields dstack's own plan shows for a grouped
 * task, with resources after dstack's server-side defaults. Sizes are in GB; null means unbounded
 * or unset.
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

export function planToJson(plan: Plan): PlanJson {
  return {
    run_name: plan.run_name,
    nodes_num: plan.nodes_num,
    groups: plan.groups.map((g) => ({
      index: g.index,
      name: g.name,
      nodes: g.nodes,
      resources: {
        cpu: { arch: g.resources.cpu.arch, count: { ...g.resources.cpu.count } },
        memory: { ...g.resources.memory },
        disk: g.resources.disk ? { ...g.resources.disk } : null,
        gpu: {
          vendor: g.resources.gpu.vendor,
          name: g.resources.gpu.name ? [...g.resources.gpu.name] : null,
          count: { ...g.resources.gpu.count },
          memory: g.resources.gpu.memory ? { ...g.resources.gpu.memory } : null,
        },
      },
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
