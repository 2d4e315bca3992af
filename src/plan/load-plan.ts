import { ConfigError } from '../config/errors';
import type { FieldPath } from '../config/field-path';
import { defaultResources, withServerDefaults, vendorsNeedingImage } from '../config/resources';
import type { Resources } from '../config/resources-schema';
import type { RetryInput } from '../config/retry';
import type { StopCriteriaInput } from '../config/stop-criteria';
import { TaskConfigSchema, type TaskConfig } from '../config/task-schema';
import { parseWithSchema } from '../config/validate';
import { ConfigSource } from '../config/yaml-source';
import { checkConfigType } from '../config/config-type';
import { looksSecret } from '../config/secret-names';
import { containsReference, InterpolationError, parseReferences, type ReferenceMember } from './interpolation';
import { expandJobs } from './expand';
import { formatMB, MAX_RUN_INPUT_BYTES, MAX_TOTAL_NODES, runInputBytes, TEMPORAL_PAYLOAD_LIMIT_BYTES } from './input-size';
import { PlanSchema, RetryEventSchema, type GroupPlan, type Plan, type RetryPolicy } from './plan-schema';
import { generateRunName, RUN_NAME } from './run-name';

export interface LoadPlanOptions {
  /** The submitting shell's environment: bare `KEY` entries of `env` take their value from it. */
  environ: Record<string, string | undefined>;
  /** The run's name, overriding the config's `name` (like `dstack apply -n`). */
  runName?: string;
  /**
   * Given: a bare `KEY` missing from `environ` is reported here and left out of the plan's env
   * instead of refused (for `troupe plan`, which only shows the plan). Not given: refused.
   */
  onMissingEnv?: (error: ConfigError) => void;
}

/** dstack's retry window when `retry: true` or `duration` is left out. */
const DEFAULT_RETRY_DURATION_S = 3600;

/**
 * Parses, validates and expands a task config (`type: task`) into the plan of its run: the
 * config's checks as dstack makes them on the client and on the server, its defaults, and the jobs
 * in one global rank space. Throws ConfigError (file:line:col, field path, reason).
 */
export function loadPlan(text: string, file: string, opts: LoadPlanOptions): Plan {
  const source = ConfigSource.parse(text, file);
  checkConfigType(source, 'task');
  const task = parseWithSchema(TaskConfigSchema, source);
  const image = task.image ?? null;

  const { env, secret_env } = planEnv(source, task, opts);
  checkWorkingDir(source, task);
  const runName = chooseRunName(source, task, opts.runName);
  const retry = retryPolicy(source, task.retry ?? null);

  const groups = planGroups(task, image);
  const nodesNum = groups.reduce((sum, g) => sum + g.nodes, 0);
  if (nodesNum > MAX_TOTAL_NODES) {
    throw source.error(task.groups ? ['groups'] : ['nodes'], `the task asks for ${nodesNum} nodes; a run has at most ${MAX_TOTAL_NODES}`);
  }
  const nodesMax = groups.reduce((sum, g) => sum + (g.nodes_range?.max ?? g.nodes), 0);
  if (nodesMax > MAX_TOTAL_NODES) {
    throw source.error(['groups'], `the groups' nodes ranges reach ${nodesMax} nodes in all; a run has at most ${MAX_TOTAL_NODES}: lower a range's maximum`);
  }
  checkReferences(
    source,
    task,
    groups.map((g) => ({ ...g, start: g.nodes, max: g.nodes_range?.max ?? null })),
    'nodes',
  );
  checkNoReferencesOutsideCommands(source, task, groups);
  const imaged = groups.map((g) => ({ ...g, image }));
  checkGpuVendors(source, task, imaged);
  checkCpuArch(source, task, imaged);

  const maxDuration = task.max_duration ?? null;
  const plan = PlanSchema.parse({
    run_name: runName,
    nodes_num: nodesNum,
    image,
    working_dir: task.working_dir ?? null,
    env,
    secret_env,
    startup_order: task.startup_order ?? 'any',
    ...planStopCriteria(task.stop_criteria ?? 'all-done', groups),
    retry,
    // dstack's runner treats a zero limit as none.
    max_duration_s: maxDuration === 'off' || maxDuration === 0 ? null : maxDuration,
    fleets: task.fleets ?? null,
    groups,
    jobs: expandJobs(runName, groups),
  } satisfies Plan);
  const inputBytes = runInputBytes(plan);
  if (inputBytes > MAX_RUN_INPUT_BYTES) {
    throw new ConfigError(
      file,
      1,
      1,
      '(plan)',
      `the run's input is ${formatMB(inputBytes)}; Temporal accepts at most ${formatMB(TEMPORAL_PAYLOAD_LIMIT_BYTES)} per payload and Troupe keeps the plan under ${formatMB(MAX_RUN_INPUT_BYTES)}: each node's job carries the commands, so ship large content in the image or a file`,
    );
  }
  return plan;
}

/** The plan's stop criteria: `{group-done: NAME}` becomes the group's index (the config checked the name). */
function planStopCriteria(criteria: StopCriteriaInput, groups: readonly GroupPlan[]): Pick<Plan, 'stop_criteria' | 'stop_group'> {
  if (typeof criteria === 'string') return { stop_criteria: criteria };
  const group = groups.find((g) => g.name === criteria.group_done);
  if (!group) throw new Error(`stop_criteria: no group named "${criteria.group_done}"`);
  return { stop_criteria: 'group-done', stop_group: group.index };
}

/** A task or a service: whether it has `groups:` decides where a group's fields are in the file. */
interface GroupedConfig {
  groups?: readonly unknown[] | null | undefined;
}

/** Where group `index`'s fields are in the file: under `groups[index]`, or at the top without groups. */
function groupPath(config: GroupedConfig, index: number, ...rest: (string | number)[]): FieldPath {
  return config.groups ? ['groups', index, ...rest] : rest;
}

function planGroups(task: TaskConfig, image: string | null): GroupPlan[] {
  const withDefaults = (resources: Resources | undefined): Resources => withServerDefaults(resources ?? defaultResources(), image);
  if (!task.groups) {
    return [
      {
        index: 0,
        name: '0',
        nodes: task.nodes ?? 1,
        resources: withDefaults(task.resources),
        commands: task.commands ?? [],
        ports: task.ports ?? [],
      },
    ];
  }
  // With groups, each group has its own resources; the top-level ones are not inherited (dstack).
  const names = task.groups.map((group, index) => group.name ?? String(index));
  const indexOf = new Map(names.map((name, i) => [name, i]));
  return task.groups.map((group, index) => ({
    index,
    name: names[index] ?? String(index),
    nodes: group.nodes?.nodes ?? 1,
    resources: withDefaults(group.resources),
    commands: group.commands ?? [],
    ports: group.ports ?? [],
    depends_on: (group.depends_on ?? []).map((dep) => indexOf.get(dep) ?? -1),
    ready: group.ready?.probe ?? null,
    ready_min: group.ready?.min ?? null,
    nodes_range: group.nodes?.range ?? null,
    on_failure: group.on_failure ?? null,
    on_dependency_restart: group.on_dependency_restart ?? 'keep',
    on_peers_change: group.on_peers_change ?? null,
  }));
}

/** The run's env (bare `KEY` entries read from the shell) and which of its variables are sealed. */
export function planEnv(
  source: ConfigSource,
  config: Pick<TaskConfig, 'env' | 'secret_env'>,
  opts: LoadPlanOptions,
  kind: 'task' | 'service' = 'task',
): { env: Record<string, string>; secret_env: string[] } {
  const { env, fromShell } = resolveEnv(source, config, opts);
  const declaredSecret = new Set(config.secret_env ?? []);
  (config.secret_env ?? []).forEach((name, i) => {
    if (!(name in env) && !(config.env ?? []).some((e) => e.key === name)) {
      throw source.error(['secret_env', i], `${JSON.stringify(name)} is not in \`env\`: secret_env marks variables of the ${kind}'s env as secret`);
    }
  });
  return { env, secret_env: Object.keys(env).filter((name) => fromShell.has(name) || declaredSecret.has(name) || looksSecret(name)) };
}

export function checkWorkingDir(source: ConfigSource, config: Pick<TaskConfig, 'working_dir'>): void {
  if (config.working_dir !== null && config.working_dir !== undefined && !config.working_dir.startsWith('/')) {
    throw source.error(['working_dir'], `working_dir must be an absolute path, got "${config.working_dir}"`);
  }
}

function resolveEnv(source: ConfigSource, task: Pick<TaskConfig, 'env'>, opts: LoadPlanOptions): { env: Record<string, string>; fromShell: Set<string> } {
  const env: Record<string, string> = {};
  const fromShell = new Set<string>();
  for (const entry of task.env ?? []) {
    const value = entry.value ?? opts.environ[entry.key];
    if (value === undefined) {
      const error = source.error(
        ['env', entry.at],
        `environment variable ${entry.key} is not set in this shell: export it, or write ${entry.key}=<value>`,
      );
      if (!opts.onMissingEnv) throw error;
      opts.onMissingEnv(error);
      continue;
    }
    if (hasReference(value)) {
      throw source.error(
        ['env', entry.at],
        '`${{ ... }}` is not supported in `env`: group addresses go in commands, and Troupe has no secrets to fill in',
      );
    }
    env[entry.key] = value;
    if (entry.value === null) fromShell.add(entry.key);
  }
  return { env, fromShell };
}

/** Any unescaped `${{`, well-formed or not. */
function hasReference(text: string): boolean {
  try {
    return containsReference(text);
  } catch (err) {
    if (err instanceof InterpolationError) return true;
    throw err;
  }
}

export function chooseRunName(source: ConfigSource, task: Pick<TaskConfig, 'name'>, override: string | undefined): string {
  const name = override ?? task.name ?? undefined;
  if (name === undefined) return generateRunName();
  if (!RUN_NAME.test(name)) {
    const reason = `run name "${name}" must match ^[a-z][a-z0-9-]{1,40}$ (lowercase letters, digits and -, starting with a letter)`;
    if (override !== undefined) throw new ConfigError(source.file, 1, 1, '(run name)', reason);
    throw source.error(['name'], reason);
  }
  return name;
}

function retryPolicy(source: ConfigSource, retry: RetryInput | null): RetryPolicy | null {
  if (retry === null || retry === false) return null;
  const allEvents = [...RetryEventSchema.options];
  if (retry === true) return { on_events: allEvents, duration_s: DEFAULT_RETRY_DURATION_S };
  const duration = retry.duration ?? DEFAULT_RETRY_DURATION_S;
  if (duration < 0) throw source.error(['retry', 'duration'], `cannot be negative, got ${duration}`);
  // A zero window allows no retry at all.
  if (duration === 0) return null;
  return { on_events: [...new Set(retry.on_events ?? allEvents)], duration_s: duration };
}

/** A group as the commands' address references see it: the members it starts with, and at most. */
export interface ReferenceTarget {
  index: number;
  name: string;
  commands: readonly string[];
  /** Members (nodes or replicas) the group starts with: only those have an address when commands are filled in. */
  start: number;
  /** The most it may grow to, when that differs from `start`. */
  max: number | null;
}

/**
 * `${{ groups[i].<member>[j].IP_ADDRESS }}` names a group that exists and a member it has at start
 * (dstack's rule: a service's replicas are counted at their minimum).
 */
export function checkReferences(source: ConfigSource, config: GroupedConfig, groups: readonly ReferenceTarget[], member: ReferenceMember): void {
  const unit = member === 'nodes' ? 'node' : 'replica';
  for (const group of groups) {
    group.commands.forEach((command, k) => {
      const path = groupPath(config, group.index, 'commands', k);
      let references;
      try {
        references = parseReferences(command, member);
      } catch (err) {
        if (err instanceof InterpolationError) {
          const hint = /"secrets\./.test(err.message) ? ' (Troupe has no secrets store)' : '';
          throw source.errorInString(path, err.offset, `${err.message}${hint}`);
        }
        throw err;
      }
      for (const ref of references) {
        const target = groups[ref.group];
        const name = `groups[${ref.group}].${member}[${ref.node}].IP_ADDRESS`;
        if (!target) {
          throw source.errorInString(path, ref.start, `reference ${name} is out of range: the ${member === 'nodes' ? 'task' : 'service'} has ${groups.length} group(s), 0..${groups.length - 1}`);
        }
        if (ref.node < target.start) continue;
        const which = `group ${ref.group} ("${target.name}")`;
        if (target.start === 0) {
          throw source.errorInString(path, ref.start, `reference ${name} is out of range: ${which} scales to zero (${member}: 0..${target.max ?? 0}), so no ${unit} is guaranteed at start: read the live addresses from $TROUPE_PEERS_FILE`);
        }
        if (target.max !== null) {
          throw source.errorInString(
            path,
            ref.start,
            `reference ${name} is out of range: ${which} starts with ${target.start} ${unit}(s) (${member}: ${target.start}..${target.max}), and only those have an address in commands: use 0..${target.start - 1}, or read the live addresses from $TROUPE_PEERS_FILE`,
          );
        }
        throw source.errorInString(path, ref.start, `reference ${name} is out of range: ${which} has ${target.start} ${unit}(s), 0..${target.start - 1}`);
      }
    });
  }
}

const ONLY_IN_COMMANDS =
  '`${{ ... }}` is filled in only in `commands`; here it would reach the node as written: use the job\'s environment ($DSTACK_NODES_IPS, $DSTACK_MASTER_NODE_IP…), or $${{ for a literal';

/** `${{ }}` where nothing fills it in (a probe that could never pass, a directory named after it). */
export function checkNoReferencesOutsideCommands(
  source: ConfigSource,
  task: GroupedConfig & Pick<TaskConfig, 'working_dir'>,
  groups: readonly Pick<GroupPlan, 'index' | 'ready'>[],
): void {
  if (task.working_dir && hasReference(task.working_dir)) throw source.error(['working_dir'], ONLY_IN_COMMANDS);
  for (const group of groups) {
    if (group.ready?.check.kind === 'command' && hasReference(group.ready.check.command)) {
      throw source.error(groupPath(task, group.index, 'ready', 'command'), ONLY_IN_COMMANDS);
    }
  }
}

/** `groups[0, 2]` for a grouped task; the top-level field otherwise. */
function offendersLabel(task: GroupedConfig, indexes: number[], field: string): string {
  return task.groups ? `groups[${indexes.join(', ')}]` : `resources.${field}`;
}

/** A group's resources and the image its members run. */
type ImagedGroup = Pick<GroupPlan, 'index' | 'resources'> & { image: string | null };

export function checkGpuVendors(source: ConfigSource, task: GroupedConfig, groups: readonly ImagedGroup[]): void {
  const vendors = new Set<string>();
  const offenders: number[] = [];
  for (const group of groups) {
    const needing = vendorsNeedingImage(group.resources, group.image);
    if (needing.length > 0) {
      offenders.push(group.index);
      for (const v of needing) vendors.add(v);
    }
  }
  const first = offenders[0];
  if (first === undefined) return;
  throw source.error(
    groupPath(task, first, 'resources', 'gpu'),
    `\`image\` must be set when the requested accelerator is not supported by the default image (${[...vendors].sort().join(', ')}): set \`image\` to one built for it`,
    { label: offendersLabel(task, offenders, 'gpu') },
  );
}

export function checkCpuArch(source: ConfigSource, task: GroupedConfig, groups: readonly ImagedGroup[]): void {
  const offenders = groups.filter((g) => g.image === null && g.resources.cpu.arch === 'arm').map((g) => g.index);
  const first = offenders[0];
  if (first === undefined) return;
  throw source.error(
    groupPath(task, first, 'resources', 'cpu'),
    '`image` must be set when an ARM CPU is requested: the default image is x86 only; set `image` to an ARM or multi-arch image',
    { label: offendersLabel(task, offenders, 'cpu') },
  );
}
