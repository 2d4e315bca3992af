import { z } from 'zod';
import { StartupOrderSchema } from '../plan/plan-schema';
import { closedObject, ruleIssue } from './closed-object';
import { parseOffableDuration } from './duration';
import { parseEnv } from './env';
import { parseGroupNodes } from './group-nodes';
import { parseOnFailure } from './on-failure';
import { parsePort } from './ports';
import { ResourcesInputSchema } from './resources';
import { parseReady } from './ready';
import { fleetNameSchema, imageSchema } from './references';
import { parseRetry } from './retry';
import { parseStopCriteria } from './stop-criteria';
import { intAtLeast, parsed, ScalarError, textListSchema, textSchema } from './scalars';
import { describeValue } from './yaml-source';

/**
 * `type: task` in dstack's format (checked against dstack 0.21.2), limited to what Troupe runs.
 * Field-level syntax lives here; rules that need the whole task (groups XOR nodes, names, commands
 * or image) are checked in the same schema after the fields parse.
 */

/** Bounds on the dependency graph, so checking and ordering it stays fast and small. */
export const MAX_GROUPS = 1024;
export const MAX_DEPENDENCY_EDGES = 16_384;

/** Node group names, as dstack allows them. */
export const GROUP_NAME = /^[a-z0-9][a-z0-9-]{0,39}$/;

/**
 * dstack task fields Troupe does not implement. Each is refused by name: a config that relies on
 * one would otherwise run differently than the user expects.
 */
export const UNSUPPORTED_TASK_FIELDS: Readonly<Record<string, string | true>> = {
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

/** A group's name, as dstack allows them (node groups and replica groups alike). */
export const groupNameSchema = textSchema.refine((name) => GROUP_NAME.test(name), {
  message: 'a group name must match ^[a-z0-9][a-z0-9-]{0,39}$ (lowercase letters, digits and -, at most 40 characters)',
});

/** Troupe's extensions of a group, the same on a task's node groups and a service's replica groups. */
export const groupExtensionShape = {
  /** Names of the groups whose every node must be READY before this one starts. */
  depends_on: textListSchema.optional(),
  /** The readiness probe of this group's nodes, and/or the quorum `min`. */
  ready: parsed(parseReady).optional(),
  /** What a failed node of this group does to the run. */
  on_failure: parsed(parseOnFailure).optional(),
  /** What this group does when a group it depends on restarts. */
  on_dependency_restart: parsed(parseDependencyRestart).optional(),
  /** A command run on each node when the addresses of the groups it depends on change. */
  on_peers_change: textSchema
    .refine((command) => command.trim() !== '', { message: 'expected a command to run, got an empty string' })
    .optional(),
};
type GroupExtensions = { [K in keyof typeof groupExtensionShape]?: z.output<(typeof groupExtensionShape)[K]> };

const groupShape = {
  name: groupNameSchema.nullish(),
  /** A count, or (Troupe's extension) a range MIN..MAX that `troupe scale` resizes within. */
  nodes: parsed(parseGroupNodes).optional(),
  resources: ResourcesInputSchema.optional(),
  commands: textListSchema.optional(),
  ports: portsSchema.optional(),
  ...groupExtensionShape,
};

export function parseDependencyRestart(value: unknown): 'keep' | 'restart' {
  if (value === 'keep' || value === 'restart') return value;
  throw new ScalarError(`expected keep or restart, got ${describeValue(value)}`);
}

/** One entry of `groups:` (with Troupe's extensions: `depends_on`, `ready`, `on_failure`…). */
export const NodeGroupInputSchema = closedObject(groupShape, { what: 'a group' });
export type NodeGroupInput = z.output<typeof NodeGroupInputSchema>;

/** The fields a task and a service share (dstack's run configuration, and Troupe's `secret_env`). */
export const runShape = {
  name: textSchema.nullish(),
  image: imageSchema.nullish(),
  env: parsed(parseEnv).optional(),
  commands: textListSchema.optional(),
  resources: ResourcesInputSchema.optional(),
  startup_order: StartupOrderSchema.nullish(),
  working_dir: textSchema.nullish(),
  /** Fleets the run may use, by name. */
  fleets: z.array(fleetNameSchema).nullish(),
  /** Troupe extension: env vars sealed whatever their names (as `*_TOKEN`, `*_PASSWORD`… are). */
  secret_env: textListSchema.nullish(),
};

const taskShape = {
  type: z.literal('task'),
  ...runShape,
  ports: portsSchema.optional(),
  nodes: intAtLeast(1).nullish(),
  groups: z.array(NodeGroupInputSchema).max(MAX_GROUPS, { message: `at most ${MAX_GROUPS} groups in a task` }).nullish(),
  /** dstack's all-done / master-done, or (Troupe's extension) `{group-done: GROUP}`. */
  stop_criteria: parsed(parseStopCriteria).nullish(),
  retry: parsed(parseRetry).nullish(),
  max_duration: parsed(parseOffableDuration).optional(),
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
  checkStopGroup(task.stop_criteria, groups, ctx);
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
  // As dstack: an `image` lets a group go without commands (an empty one is refused by its grammar).
  const taskHasImage = task.image !== null && task.image !== undefined;
  const names = checkGroupNames(groups, ctx);
  groups.forEach((group, index) => {
    const name = names[index] ?? String(index);
    checkGroupPolicies(name, index, group, startOf(group.nodes, 'node'), ctx);
    if ((group.commands ?? []).length === 0 && !taskHasImage) {
      ctx.addIssue(
        ruleIssue(['groups', index], `group "${name}" has no \`commands\`: give it \`commands\`, or set \`image\` at the task level`),
      );
    }
  });
  checkDependencies(task.startup_order ?? null, groups, ctx);
});

/** `stop_criteria: {group-done: GROUP}` names one of the task's groups. */
function checkStopGroup(
  criteria: TaskConfig['stop_criteria'],
  groups: readonly { name?: string | null }[] | null | undefined,
  ctx: z.RefinementCtx,
): void {
  if (criteria === null || criteria === undefined || typeof criteria === 'string') return;
  const path = ['stop_criteria', 'group-done'];
  if (!groups) {
    ctx.addIssue(ruleIssue(path, '`group-done` needs `groups`: with `nodes` the run has one group; use all-done or master-done'));
    return;
  }
  const names = groups.map((g, i) => g.name ?? String(i));
  if (!names.includes(criteria.group_done)) {
    const listed = names.length > 10 ? `${names.slice(0, 10).join(', ')}, ...` : names.join(', ');
    ctx.addIssue(ruleIssue(path, `no group named "${criteria.group_done}" (groups: ${listed})`));
  }
}

/** Each group's name (its index when it has none); a name used twice is refused where it is repeated. */
export function checkGroupNames(groups: readonly { name?: string | null }[], ctx: z.RefinementCtx): string[] {
  const firstIndexOf = new Map<string, number>();
  return groups.map((group, index) => {
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
    return name;
  });
}

/** How many members (nodes or replicas) a group starts with, and up to how many it may grow. */
export interface GroupStart {
  count: number;
  max: number | null;
  unit: 'node' | 'replica';
}

function startOf(nodes: NodeGroupInput['nodes'], unit: 'node'): GroupStart {
  return { count: nodes?.nodes ?? 1, max: nodes?.range?.max ?? null, unit };
}

/** Rules between a group's own fields: the quorum fits the group, a dependency policy has dependencies. */
export function checkGroupPolicies(name: string, index: number, group: GroupExtensions, start: GroupStart, ctx: z.RefinementCtx): void {
  const quorum = group.ready?.min;
  if (quorum?.kind === 'count' && quorum.value > start.count) {
    const unit = `${start.unit}${start.count === 1 ? '' : 's'}`;
    const field = `${start.unit}s`;
    const starts = start.max !== null ? `starts with ${start.count} ${unit} (${field}: ${start.count}..${start.max})` : `has ${start.count} ${unit}`;
    ctx.addIssue(
      ruleIssue(['groups', index, 'ready', 'min'], `ready.min is ${quorum.value} but group "${name}" ${starts}: its dependents would wait for ${field} it does not start with; lower it or use a percentage`),
    );
  }
  if ((group.depends_on ?? []).length > 0) return;
  if (group.on_dependency_restart !== undefined) {
    ctx.addIssue(
      ruleIssue(['groups', index, 'on_dependency_restart'], `group "${name}" has no \`depends_on\`: on_dependency_restart says what it does when a group it depends on restarts; add depends_on or remove it`, 'key'),
    );
  }
  if (group.on_peers_change !== undefined) {
    ctx.addIssue(
      ruleIssue(['groups', index, 'on_peers_change'], `group "${name}" has no \`depends_on\`: on_peers_change runs when the groups it depends on change; add depends_on or remove it`, 'key'),
    );
  }
}

/** depends_on names exist, are not the group itself, form no cycle, and do not meet startup_order. */
export function checkDependencies(
  startupOrder: string | null,
  groups: readonly { name?: string | null; depends_on?: string[] | undefined }[],
  ctx: z.RefinementCtx,
): void {
  const names = groups.map((g, i) => g.name ?? String(i));
  const uses = groups.findIndex((g) => (g.depends_on ?? []).length > 0);
  if (uses === -1) return;
  if (startupOrder !== null) {
    ctx.addIssue(
      ruleIssue(
        ['startup_order'],
        `\`startup_order\` and \`depends_on\` (groups[${uses}]) cannot be combined: depends_on already orders start-up; remove startup_order`,
        'key',
      ),
    );
    return;
  }
  const edges = groups.reduce((sum, g) => sum + (g.depends_on ?? []).length, 0);
  if (edges > MAX_DEPENDENCY_EDGES) {
    ctx.addIssue(
      ruleIssue(['groups'], `depends_on lists ${edges} dependencies in all; a task has at most ${MAX_DEPENDENCY_EDGES}: depend on fewer groups (readiness is transitive)`),
    );
    return;
  }
  const indexOf = new Map(names.map((name, i) => [name, i]));
  let bad = false;
  groups.forEach((group, i) => {
    (group.depends_on ?? []).forEach((dep, k) => {
      if (dep === names[i]) {
        ctx.addIssue(ruleIssue(['groups', i, 'depends_on', k], `group "${dep}" cannot depend on itself`));
        bad = true;
      } else if (!indexOf.has(dep)) {
        const listed = names.length > 10 ? `${names.slice(0, 10).join(', ')}, ...` : names.join(', ');
        ctx.addIssue(ruleIssue(['groups', i, 'depends_on', k], `no group named "${dep}" (groups: ${listed})`));
        bad = true;
      }
    });
  });
  if (bad) return;
  const cycle = findCycle(groups.map((g) => (g.depends_on ?? []).map((d) => indexOf.get(d) ?? -1)));
  if (cycle) {
    const [first] = cycle;
    ctx.addIssue(
      ruleIssue(['groups', first ?? 0, 'depends_on'], `depends_on has a cycle: ${[...cycle, first ?? 0].map((i) => names[i]).join(' → ')}`),
    );
  }
}

/** A cycle in the dependency graph (group indices, in order), or null. */
function findCycle(edges: readonly number[][]): number[] | null {
  const state = edges.map(() => 0); // 0 unvisited, 1 on the path, 2 done
  const path: number[] = [];
  const visit = (node: number): number[] | null => {
    state[node] = 1;
    path.push(node);
    for (const next of edges[node] ?? []) {
      if (state[next] === 1) return path.slice(path.indexOf(next));
      if (state[next] === 0) {
        const found = visit(next);
        if (found) return found;
      }
    }
    path.pop();
    state[node] = 2;
    return null;
  };
  for (let i = 0; i < edges.length; i++) {
    if (state[i] === 0) {
      const found = visit(i);
      if (found) return found;
    }
  }
  return null;
}

export type TaskConfig = z.output<typeof TaskConfigSchema>;
