import { z } from 'zod';
import { closedObject, ruleIssue } from './closed-object';
import { parseDuration } from './duration';
import { parsePort } from './ports';
import { RolloutInputSchema } from './rollout';
import { parseReplicas, ReplicaGroupInputSchema, ScalingInputSchema, type ReplicaCount, type ReplicaGroupInput, type ScalingInput } from './replica-groups';
import { booleanSchema, intAtLeast, parsed, REQUIRED, ScalarError, scalar, textSchema, toNumber } from './scalars';
import { checkDependencies, checkGroupNames, checkGroupPolicies, MAX_GROUPS, runShape, UNSUPPORTED_TASK_FIELDS } from './task-schema';
import { describeValue } from './yaml-source';

/**
 * `type: service` in dstack's format (checked against dstack 0.22.5): the port, auth, rate limits,
 * probes, the model, and either `replicas` (with `scaling`) or `groups:` of replicas, at most one
 * of them a router. Field syntax first; the rules across fields in the schema's superRefine.
 */

/** dstack's probe limits (its server's defaults). */
export const MAX_PROBES = 10;
export const MAX_PROBE_TIMEOUT_S = 300;
const MAX_PROBE_URL = 2048;
const MAX_HEADERS = 16;

/** The port the service listens on: `8000`, `"80:8000"` or `{container_port: 8000}`; only the container port is used. */
function parseServicePort(value: unknown): number {
  if (value === undefined) throw new ScalarError(REQUIRED);
  if (typeof value === 'string' && value.startsWith('*:')) {
    throw new ScalarError(`expected a port such as 8000 or "80:8000", got ${describeValue(value)}: a service has no local port to pick`);
  }
  return parsePort(value).container_port;
}

function boundedText(what: string, min: number, max: number, pattern?: { re: RegExp; hint: string }) {
  return textSchema.superRefine((text, ctx) => {
    if (text.length < min || text.length > max) {
      ctx.addIssue({ code: 'custom', message: `${what} must be ${min}..${max} characters long, got ${text.length}` });
    } else if (pattern && !pattern.re.test(text)) {
      ctx.addIssue({ code: 'custom', message: `${JSON.stringify(text)} is not ${what}: ${pattern.hint}` });
    }
  });
}

/** `model: NAME` (an OpenAI-compatible API under /v1), or the mapping form with `format: openai`. */
export interface ServiceModel {
  name: string;
  prefix: string;
}

function parseModel(value: unknown): ServiceModel {
  if (typeof value === 'string') return { name: value, prefix: '/v1' };
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new ScalarError(`expected a model name or a mapping with \`name\` and \`format\`, got ${describeValue(value)}`);
  }
  const model = value as Record<string, unknown>;
  const extra = Object.keys(model).find((k) => !['type', 'name', 'format', 'prefix'].includes(k));
  if (extra !== undefined) throw new ScalarError(`unknown field \`${extra}\` in \`model\``, [extra], 'key');
  if (model.format === 'tgi') throw new ScalarError('Troupe does not support the `tgi` model format: serve an OpenAI-compatible API and write `format: openai`', ['format']);
  if (model.format !== 'openai') throw new ScalarError(`expected openai, got ${describeValue(model.format)}`, ['format']);
  if (model.type !== undefined && model.type !== 'chat') throw new ScalarError(`expected chat, got ${describeValue(model.type)}`, ['type']);
  if (typeof model.name !== 'string') throw new ScalarError(`expected the model's name, got ${describeValue(model.name)}`, ['name']);
  if (model.prefix !== undefined && typeof model.prefix !== 'string') throw new ScalarError(`expected a path prefix such as /v1, got ${describeValue(model.prefix)}`, ['prefix']);
  return { name: model.name, prefix: model.prefix ?? '/v1' };
}

/** Rate-limit partition: by client address (the default) or by a request header. */
function parseRateLimitKey(value: unknown): { type: 'ip_address' } | { type: 'header'; header: string } {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new ScalarError(`expected {type: ip_address} or {type: header, header: NAME}, got ${describeValue(value)}`);
  }
  const key = value as Record<string, unknown>;
  const type = key.type ?? 'ip_address';
  const allowed = type === 'header' ? ['type', 'header'] : ['type'];
  const extra = Object.keys(key).find((k) => !allowed.includes(k));
  if (extra !== undefined) throw new ScalarError(`unknown field \`${extra}\` in a \`${String(type)}\` key`, [extra], 'key');
  if (type === 'ip_address') return { type };
  if (type !== 'header') throw new ScalarError(`expected ip_address or header, got ${describeValue(type)}`, ['type']);
  const header = key.header;
  if (typeof header !== 'string' || !/^[a-zA-Z0-9-_]{1,500}$/.test(header)) {
    throw new ScalarError(`expected a header name (letters, digits, - and _, at most 500), got ${describeValue(header)}`, ['header']);
  }
  return { type, header };
}

/** Nginx's bounds, which dstack keeps: at least one request a minute, at most 2^63-1 a minute. */
const MAX_INT64 = 2n ** 63n - 1n;
const MAX_RPS = Number(MAX_INT64 / 60n);

export const RateLimitInputSchema = closedObject(
  {
    prefix: boundedText('a path prefix', 1, 4094, { re: /^\/[^\s\\{}]*$/, hint: 'start with / and use no spaces, \\, { or }' }).optional(),
    key: parsed(parseRateLimitKey).optional(),
    rps: scalar(`a number of requests per second, 1/60..${MAX_RPS}`, (v) => {
      const n = toNumber(v);
      return n !== undefined && n >= 1 / 60 && n <= MAX_RPS ? n : undefined;
    }),
    burst: intAtLeast(0).optional(),
  },
  { what: 'a rate limit' },
);

function probeDuration(what: string, max: number | null) {
  return (value: unknown): number => {
    const seconds = parseDuration(value);
    if (seconds < 1) throw new ScalarError(`a probe ${what} is at least 1s, got ${describeValue(value)}`);
    if (max !== null && seconds > max) throw new ScalarError(`a probe ${what} is at most ${max}s, got ${describeValue(value)}`);
    return seconds;
  };
}

export const ProbeMethodSchema = z.enum(['get', 'post', 'put', 'delete', 'patch', 'head']);

export const ProbeInputSchema = closedObject(
  {
    type: scalar('http (the only probe type)', (v) => (v === 'http' ? ('http' as const) : undefined)),
    url: boundedText('a URL path', 1, MAX_PROBE_URL, { re: /^\/[\x20-\x7e\u00a0-\uffff]*$/, hint: 'start with / and use printable characters' }).nullish(),
    method: ProbeMethodSchema.nullish(),
    headers: z
      .array(closedObject({ name: boundedText('a header name', 1, 256), value: boundedText('a header value', 1, 2048) }, { what: 'a header' }))
      .max(MAX_HEADERS, { message: `at most ${MAX_HEADERS} headers` })
      .optional(),
    body: boundedText('a request body', 1, 2048).nullish(),
    timeout: parsed(probeDuration('timeout', MAX_PROBE_TIMEOUT_S)).nullish(),
    interval: parsed(probeDuration('interval', null)).nullish(),
    ready_after: intAtLeast(1).nullish(),
    until_ready: booleanSchema.nullish(),
  },
  { what: 'a probe' },
);
export type ProbeInput = z.output<typeof ProbeInputSchema>;

/** Fields of a dstack service Troupe will read once the gateway and service runs are built. */
const PLANNED_SERVICE_FIELDS = ['gateway', 'https', 'retry', 'max_duration'];

const serviceShape = {
  type: z.literal('service'),
  ...runShape,
  port: parsed(parseServicePort),
  auth: booleanSchema.optional(),
  strip_prefix: booleanSchema.optional(),
  model: parsed(parseModel).nullish(),
  rate_limits: z.array(RateLimitInputSchema).optional(),
  probes: z.array(ProbeInputSchema).nullish(),
  replicas: parsed(parseServiceReplicas).nullish(),
  scaling: ScalingInputSchema.nullish(),
  groups: z.array(ReplicaGroupInputSchema).max(MAX_GROUPS, { message: `at most ${MAX_GROUPS} groups in a service` }).nullish(),
  /** Troupe's extension: how a new revision replaces the old (rollout.ts). */
  rollout: RolloutInputSchema.nullish(),
};

function parseServiceReplicas(value: unknown): ReplicaCount {
  if (Array.isArray(value)) {
    throw new ScalarError('a list under `replicas` is dstack\'s older spelling of `groups`: rename `replicas:` to `groups:`');
  }
  return parseReplicas(value);
}

export const ServiceConfigSchema = closedObject(serviceShape, {
  what: 'the service',
  unsupported: UNSUPPORTED_TASK_FIELDS,
  planned: PLANNED_SERVICE_FIELDS,
}).superRefine((service, ctx) => {
  checkRateLimits(service.rate_limits ?? [], ctx);
  checkProbes(service.probes ?? [], ctx);
  const groups = service.groups;
  if (groups === null || groups === undefined) {
    if ((service.commands ?? []).length === 0 && !service.image) {
      ctx.addIssue(ruleIssue(['commands'], 'either `commands` or `image` must be set'));
    }
    checkScaling(service.replicas ?? { min: 1, max: 1 }, service.scaling, [], ctx);
    checkReplicaMetrics(service.scaling, [], 'the service', ctx);
    return;
  }
  if (service.replicas !== null && service.replicas !== undefined) {
    ctx.addIssue(ruleIssue(['replicas'], '`replicas` and `groups` are mutually exclusive: give each group its `replicas` instead', 'key'));
  }
  if (groups.length === 0) ctx.addIssue(ruleIssue(['groups'], '`groups` cannot be empty: list at least one group, or remove it'));
  if (service.scaling !== null && service.scaling !== undefined) {
    ctx.addIssue(ruleIssue(['scaling'], 'top-level `scaling` is not allowed when `groups` is set: give each group its `scaling`', 'key'));
  }
  if ((service.commands ?? []).length > 0) {
    ctx.addIssue(ruleIssue(['commands'], 'top-level `commands` is not allowed when `groups` is set: give each group its `commands`', 'key'));
  }
  const serviceHasImage = service.image !== null && service.image !== undefined;
  const names = checkGroupNames(groups, ctx);
  let router: number | undefined;
  groups.forEach((group, index) => {
    const name = names[index] ?? String(index);
    const replicas = groupReplicas(group);
    if (replicas === undefined) {
      ctx.addIssue(ruleIssue(['groups', index], `group "${name}" has no \`replicas\`: write replicas: N or MIN..MAX`));
      return;
    }
    checkScaling(replicas, group.scaling, ['groups', index], ctx);
    if (serviceHasImage && group.image) {
      ctx.addIssue(ruleIssue(['groups', index, 'image'], `\`image\` is set both on the service and in group "${name}": set it in one place only`));
    }
    if ((group.commands ?? []).length === 0 && !group.image && !serviceHasImage) {
      ctx.addIssue(ruleIssue(['groups', index], `group "${name}" has no \`commands\`: give it \`commands\` or \`image\`, or set \`image\` on the service`));
    }
    if (group.router) {
      if (router !== undefined) {
        ctx.addIssue(ruleIssue(['groups', index, 'router'], `at most one group may have \`router\` (also groups[${router}])`, 'key'));
      } else if (replicas.min !== 1 || replicas.max !== 1) {
        ctx.addIssue(ruleIssue(['groups', index, 'replicas'], `the router group "${name}" must have replicas: 1 (dstack runs one router)`));
      }
      router ??= index;
    }
    checkGroupPolicies(name, index, group, { count: replicas.min, max: replicas.min === replicas.max ? null : replicas.max, unit: 'replica' }, ctx);
  });
  checkDependencies(service.startup_order ?? null, groups, ctx);
  checkNoDependencyOnZero(names, groups, ctx);
  groups.forEach((group, index) => {
    const entry = router === undefined || router === index;
    checkReplicaMetrics(group.scaling, ['groups', index], entry ? `group "${names[index] ?? index}", an entry group,` : null, ctx);
  });
});

/**
 * Troupe's `scaling.replica_metrics`: only for a group behind the router (the gateways count an entry
 * group's own traffic already: `entry` names it, else null), with the metric its `scaling.metric` reads.
 */
function checkReplicaMetrics(scaling: ScalingInput | null | undefined, at: (string | number)[], entry: string | null, ctx: z.RefinementCtx): void {
  const metrics = scaling?.replica_metrics;
  if (!scaling || !metrics) return;
  const path = [...at, 'scaling', 'replica_metrics'];
  if (entry !== null) {
    ctx.addIssue(ruleIssue(path, `${entry} takes the requests the gateways send, and they count its own traffic: \`replica_metrics\` is for a group behind the router`, 'key'));
    return;
  }
  if (scaling.metric === 'rps' && metrics.requests === undefined) {
    ctx.addIssue(ruleIssue(path, '`metric: rps` reads a counter of the requests each replica answered: name it in `requests` (e.g. vllm:request_success_total)'));
  }
  if (scaling.metric === 'concurrency' && metrics.inflight === undefined) {
    ctx.addIssue(ruleIssue(path, '`metric: concurrency` reads a gauge of the requests each replica is serving: name it in `inflight` (e.g. vllm:num_requests_running)'));
  }
}

/** Troupe's rule: a group cannot wait at start for a group that starts with no replica (it would wait for traffic). */
function checkNoDependencyOnZero(names: readonly string[], groups: readonly ReplicaGroupInput[], ctx: z.RefinementCtx): void {
  const replicasOf = new Map(groups.map((g, i) => [names[i] ?? String(i), groupReplicas(g)]));
  groups.forEach((group, index) => {
    (group.depends_on ?? []).forEach((dep, k) => {
      const replicas = replicasOf.get(dep);
      if (replicas?.min !== 0) return;
      ctx.addIssue(
        ruleIssue(['groups', index, 'depends_on', k], `group "${dep}" starts with 0 replicas (replicas: 0..${replicas.max}): "${names[index] ?? index}" would wait until it scales up; depend on groups that start with at least 1 replica`),
      );
    });
  });
}

/** A group's replicas (`count` is dstack's older name, ignored beside `replicas`). */
export function groupReplicas(group: ReplicaGroupInput): ReplicaCount | undefined {
  return group.replicas ?? group.count;
}

/** dstack's rule: a range of replicas needs `scaling`, and `scaling` needs a range; Troupe's `scaling.hold` needs a range from 0. */
function checkScaling(replicas: ReplicaCount, scaling: ScalingInput | null | undefined, at: (string | number)[], ctx: z.RefinementCtx): void {
  const hasScaling = scaling !== null && scaling !== undefined;
  if (scaling?.hold !== undefined && replicas.min !== 0) {
    ctx.addIssue(ruleIssue([...at, 'scaling', 'hold'], `\`hold\` is how long the gateways hold a request while a group scaled to zero wakes: this one starts with ${replicas.min} (replicas: 0..${replicas.max} to scale it to zero)`, 'key'));
  }
  if (replicas.min !== replicas.max && !hasScaling) {
    ctx.addIssue(ruleIssue([...at, 'replicas'], `replicas ${replicas.min}..${replicas.max} is a range: add \`scaling\` (metric: rps, target), or give a fixed count`));
  }
  if (replicas.min === replicas.max && hasScaling) {
    ctx.addIssue(ruleIssue([...at, 'scaling'], `\`scaling\` needs \`replicas\` to be a range such as 1..4 (replicas is ${replicas.min})`, 'key'));
  }
}

function checkRateLimits(limits: readonly { prefix?: string | undefined }[], ctx: z.RefinementCtx): void {
  const seen = new Map<string, number>();
  limits.forEach((limit, index) => {
    const prefix = limit.prefix ?? '/';
    const earlier = seen.get(prefix);
    if (earlier !== undefined) {
      ctx.addIssue(ruleIssue(['rate_limits', index], `prefix ${prefix} has a rate limit already (rate_limits[${earlier}]): one limit per prefix`));
    } else {
      seen.set(prefix, index);
    }
  });
}

function checkProbes(probes: readonly ProbeInput[], ctx: z.RefinementCtx): void {
  if (probes.length > MAX_PROBES) {
    ctx.addIssue(ruleIssue(['probes'], `${probes.length} probes: at most ${MAX_PROBES}`));
  }
  const seen = new Map<string, number>();
  probes.forEach((probe, index) => {
    if (probe.body !== null && probe.body !== undefined && (probe.method === 'get' || probe.method === 'head')) {
      ctx.addIssue(ruleIssue(['probes', index, 'body'], `a \`${probe.method}\` probe cannot send a body: use method post (or put, patch, delete)`, 'key'));
    }
    const key = JSON.stringify(probe);
    const earlier = seen.get(key);
    if (earlier !== undefined) {
      ctx.addIssue(ruleIssue(['probes', index], `the same probe as probes[${earlier}]: probes must be unique`));
    } else {
      seen.set(key, index);
    }
  });
}

export type ServiceConfig = z.output<typeof ServiceConfigSchema>;
