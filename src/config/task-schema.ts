import { z } from 'zod';
import { StartupOrderSchema, StopCriteriaSchema } from '../plan/plan-schema';
import { closedObject, ruleIssue } from './closed-object';
import { parseOffableDuration } from './duration';
import { parseEnv } from './env';
import { parsePort } from './ports';
import { ResourcesInputSchema } from './resources';
import { parseRetry } from './retry';
import { intAtLeast, parsed, textListSchema, textSchema } from './scalars';

/**
 * `type: task` in dstack's format (checked against dstack 0.21.2), limited to what Troupe runs.
 * Field-level syntax lives here; rules that need the whole task (groups XOR nodes, names, commands
 * or image) are checked in the same schema after the fields parse.
 */

/** Node group names, as dstack allows them. */
const GROUP_NAME = /^[a-z0-9][a-z0-9-]{0,39}$/;

/**
 * dstack task fields Troupe does not implement. Each is refused by name: a config that relies on
 * one would otherwise run differently than the user expects.
 */
const UNSUPPORTED_TASK_FIELDS: Readonly<Record<string, string | true>> = {
  user: true,
  privileged: true,
  home_dir: true,
  registry_auth: true,
  python: 'set `image` or install Python in `commands`',
  nvcc: true,
  single_branch: true,
  shell: 'commands run with bash',
  priority: true,
  volumes: true,
  docker: true,
  repos: true,
  files: true,
  dstack: true,
  setup: 'put the commands first in `commands`',
  backends: 'runs go to fleets, not clouds',
  regions: true,
  availability_zones: true,
  instance_types: true,
  reservation: true,
  spot_policy: true,
  stop_duration: true,
  max_price: true,
  creation_policy: true,
  idle_duration: true,
  utilization_policy: true,
  schedule: true,
  instances: 'use `fleets`',
  tags: true,
  backend_options: true,
  entrypoint: 'Troupe runs `commands`',
};

const portsSchema = z.array(parsed(parsePort));

const groupShape = {
  name: textSchema
    .refine((name) => GROUP_NAME.test(name), {
      message: 'a group name must match ^[a-z0-9][a-z0-9-]{0,39}$ (lowercase letters, digits and -, at most 40 characters)',
    })
    .nullish(),
  nodes: intAtLeast(1).optional(),
  resources: ResourcesInputSchema.optional(),
  commands: textListSchema.optional(),
  ports: portsSchema.optional(),
};

/**
 * One entry of `groups:`. Later Troupe versions add `depends_on` and `ready` here; until then
 * they are refused like any field Troupe does not run.
 */
export const NodeGroupInputSchema = closedObject(groupShape, { what: 'a group', planned: ['depends_on', 'ready'] });
export type NodeGroupInput = z.output<typeof NodeGroupInputSchema>;

const taskShape = {
  type: z.literal('task'),
  name: textSchema.nullish(),
  image: textSchema.nullish(),
  env: parsed(parseEnv).optional(),
  commands: textListSchema.optional(),
  ports: portsSchema.optional(),
  resources: ResourcesInputSchema.optional(),
  nodes: intAtLeast(1).nullish(),
  groups: z.array(NodeGroupInputSchema).nullish(),
  startup_order: StartupOrderSchema.nullish(),
  stop_criteria: StopCriteriaSchema.nullish(),
  retry: parsed(parseRetry).nullish(),
  max_duration: parsed(parseOffableDuration).optional(),
  working_dir: textSchema.nullish(),
  /** Fleets the run may use, by name. */
  fleets: z.array(textSchema).nullish(),
};

export const TaskConfigSchema = closedObject(taskShape, {
  what: 'the task',
  unsupported: UNSUPPORTED_TASK_FIELDS,
  special: (field, mapping) =>
    field === 'entrypoint' && mapping.groups !== undefined && mapping.groups !== null
      ? 'top-level `entrypoint` is not allowed when `groups` is set: give each group `commands`'
      : undefined,
}).superRefine((task, ctx) => {
  const groups = task.groups;
  if (groups === null || groups === undefined) {
    if ((task.commands ?? []).length === 0 && !task.image) {
      ctx.addIssue(ruleIssue(['commands'], 'either `commands` or `image` must be set'));
    }
    return;
  }
  if (task.nodes !== null && task.nodes !== undefined) {
    ctx.addIssue(ruleIssue(['nodes'], '`nodes` and `groups` are mutually exclusive: give each group its `nodes` instead', 'key'));
  }
  if (groups.length === 0) {
    ctx.addIssue(ruleIssue(['groups'], '`groups` cannot be empty: list at least one group, or remove it'));
  }
  for (const field of ['commands', 'ports'] as const) {
    if ((task[field] ?? []).length > 0) {
      ctx.addIssue(
        ruleIssue([field], `top-level \`${field}\` is not allowed when \`groups\` is set: give each group its \`${field}\``, 'key'),
      );
    }
  }
  // As dstack: any `image`, even an empty one, lets a group go without commands.
  const taskHasImage = task.image !== null && task.image !== undefined;
  const firstIndexOf = new Map<string, number>();
  groups.forEach((group, index) => {
    const name = group.name ?? String(index);
    const earlier = firstIndexOf.get(name);
    if (earlier !== undefined) {
      ctx.addIssue(
        ruleIssue(
          group.name ? ['groups', index, 'name'] : ['groups', index],
          `duplicate group name "${name}" (also groups[${earlier}]): names must be unique; a group without \`name\` is named by its index`,
        ),
      );
    } else {
      firstIndexOf.set(name, index);
    }
    if ((group.commands ?? []).length === 0 && !taskHasImage) {
      ctx.addIssue(
        ruleIssue(['groups', index], `group "${name}" has no \`commands\`: give it \`commands\`, or set \`image\` at the task level`),
      );
    }
  });
});

export type TaskConfig = z.output<typeof TaskConfigSchema>;
