import { checkConfigType } from '../config/config-type';
import { defaultResources, withServerDefaults } from '../config/resources';
import type { Resources } from '../config/resources-schema';
import type { ScalingInput } from '../config/replica-groups';
import type { RolloutInput } from '../config/rollout';
import { groupReplicas, ServiceConfigSchema, type ProbeInput, type ServiceConfig, type ServiceModel } from '../config/service-schema';
import { parseWithSchema } from '../config/validate';
import { ConfigError } from '../config/errors';
import { ConfigSource } from '../config/yaml-source';
import { MAX_TOTAL_NODES } from './input-size';
import type { RolloutPlan } from './plan-schema';
import {
  checkCpuArch,
  checkGpuVendors,
  checkNoReferencesOutsideCommands,
  checkReferences,
  checkWorkingDir,
  chooseRunName,
  planEnv,
  type LoadPlanOptions,
} from './load-plan';
import { serviceRevision } from './revision';
import { ServicePlanSchema, type ReplicaGroupPlan, type ScalingPlan, type ServicePlan, type ServiceProbe } from './service-plan-schema';

/**
 * The parsed config when it is a service (`type: service`), else null — also when it does not
 * parse: the task planner then says what is wrong with it.
 */
export function serviceSource(text: string, file: string): ConfigSource | null {
  try {
    const source = ConfigSource.parse(text, file);
    return source.data.type === 'service' ? source : null;
  } catch (err) {
    if (err instanceof ConfigError) return null;
    throw err;
  }
}

/** dstack's defaults for a probe's unset fields, and for scaling. */
const PROBE_DEFAULTS = { url: '/', method: 'get', timeout_s: 10, interval_s: 15, ready_after: 1, until_ready: false } as const;
/** The model's default probe may wait longer: a first completion can be slow. */
const MODEL_PROBE_TIMEOUT_S = 30;
const SCALING_DEFAULTS = { window_s: 60, scale_up_delay_s: 300, scale_down_delay_s: 600 } as const;
/** Troupe's rollout defaults: the new revision's full share at once, gated, rolled back on its own. */
const ROLLOUT_DEFAULTS = {
  max_surge: { kind: 'percent', p: 100 },
  steps: 1,
  gates: { error_rate: 0.05, p95_factor: 2, progress_deadline_s: 600 },
  rollback: 'auto',
  drain_timeout_s: 30,
} as const;

/**
 * Parses and validates a service config (`type: service`) into its plan: dstack 0.22.5's checks
 * and defaults, Troupe's group extensions checked as on tasks. Throws ConfigError.
 */
export function loadServicePlan(text: string, file: string, opts: LoadPlanOptions): ServicePlan {
  const source = ConfigSource.parse(text, file);
  checkConfigType(source, 'service');
  const service = parseWithSchema(ServiceConfigSchema, source);
  const { env, secret_env } = planEnv(source, service, opts, 'service');
  checkWorkingDir(source, service);
  const runName = chooseRunName(source, service, opts.runName);
  const groups = planGroups(service);

  const replicasMax = groups.reduce((sum, g) => sum + g.replicas.max, 0);
  if (replicasMax > MAX_TOTAL_NODES) {
    throw source.error(service.groups ? ['groups'] : ['replicas'], `the service reaches ${replicasMax} replicas in all; a run has at most ${MAX_TOTAL_NODES}: lower a maximum`);
  }
  checkReferences(
    source,
    service,
    groups.map((g) => ({ ...g, start: g.replicas.min, max: g.replicas.min === g.replicas.max ? null : g.replicas.max })),
    'replicas',
  );
  checkNoReferencesOutsideCommands(source, service, groups);
  checkGpuVendors(source, service, groups);
  checkCpuArch(source, service, groups);

  const router = groups.find((g) => g.router !== null);
  const planned = {
    run_name: runName,
    port: service.port,
    auth: service.auth ?? true,
    strip_prefix: service.strip_prefix ?? true,
    model: service.model ?? null,
    rate_limits: (service.rate_limits ?? []).map((limit) => ({
      prefix: limit.prefix ?? '/',
      rps: limit.rps,
      burst: limit.burst ?? 0,
      key: limit.key ?? { type: 'ip_address' },
    })),
    working_dir: service.working_dir ?? null,
    env,
    secret_env,
    startup_order: service.startup_order ?? 'any',
    fleets: service.fleets ?? null,
    router_group: router?.index ?? null,
    groups,
    rollout: planRollout(service.rollout),
  } satisfies Omit<ServicePlan, 'revision'>;
  return ServicePlanSchema.parse({ ...planned, revision: serviceRevision(planned) } satisfies ServicePlan);
}

function planGroups(service: ServiceConfig): ReplicaGroupPlan[] {
  const image = service.image ?? null;
  const withDefaults = (resources: Resources | undefined, groupImage: string | null): Resources =>
    withServerDefaults(resources ?? defaultResources(), groupImage);
  const hasRouter = (service.groups ?? []).some((g) => g.router);
  if (!service.groups) {
    return [
      {
        index: 0,
        name: '0',
        replicas: service.replicas ?? { min: 1, max: 1 },
        scaling: planScaling(service.scaling),
        router: null,
        image,
        resources: withDefaults(service.resources, image),
        commands: service.commands ?? [],
        probes: planProbes(service.probes, service.model, true),
      },
    ];
  }
  const names = service.groups.map((group, index) => group.name ?? String(index));
  const indexOf = new Map(names.map((name, i) => [name, i]));
  return service.groups.map((group, index) => {
    const groupImage = group.image ?? image;
    return {
      index,
      name: names[index] ?? String(index),
      // The schema refused a group without replicas.
      replicas: groupReplicas(group) ?? { min: 1, max: 1 },
      scaling: planScaling(group.scaling),
      router: group.router ? (group.router.type ?? 'smg') : null,
      image: groupImage,
      resources: withDefaults(group.resources, groupImage),
      commands: group.commands ?? [],
      // dstack: with a router group, only the router gets the model's default probe (workers may not serve HTTP).
      probes: planProbes(service.probes, service.model, !hasRouter || Boolean(group.router)),
      depends_on: (group.depends_on ?? []).map((dep) => indexOf.get(dep) ?? -1),
      ready: group.ready?.probe ?? null,
      ready_min: group.ready?.min ?? null,
      on_failure: group.on_failure ?? null,
      on_dependency_restart: group.on_dependency_restart ?? 'keep',
      on_peers_change: group.on_peers_change ?? null,
    };
  });
}

function planScaling(scaling: ScalingInput | null | undefined): ScalingPlan | null {
  if (!scaling) return null;
  return {
    metric: scaling.metric,
    target: scaling.target,
    window_s: scaling.window ?? SCALING_DEFAULTS.window_s,
    scale_up_delay_s: scaling.scale_up_delay ?? SCALING_DEFAULTS.scale_up_delay_s,
    scale_down_delay_s: scaling.scale_down_delay ?? SCALING_DEFAULTS.scale_down_delay_s,
    ...(scaling.hold !== undefined ? { hold_s: scaling.hold } : {}),
    ...(scaling.replica_metrics
      ? { replica_metrics: { port: scaling.replica_metrics.port, path: scaling.replica_metrics.path ?? '/metrics', requests: scaling.replica_metrics.requests ?? null, inflight: scaling.replica_metrics.inflight ?? null } }
      : {}),
  };
}

function planRollout(rollout: RolloutInput | null | undefined): RolloutPlan {
  const coherence = rollout?.coherence ?? 'independent';
  const gates = rollout?.gates;
  return {
    coherence,
    // `independent` is dstack's rolling update: one new replica of a group at a time.
    max_surge: coherence === 'independent' ? { kind: 'count', n: 1 } : (rollout?.max_surge ?? ROLLOUT_DEFAULTS.max_surge),
    steps: rollout?.steps ?? ROLLOUT_DEFAULTS.steps,
    canary: rollout?.canary ? { traffic_percent: rollout.canary.traffic, soak_s: rollout.canary.soak } : null,
    gates: {
      error_rate: gates?.error_rate ?? ROLLOUT_DEFAULTS.gates.error_rate,
      p95_factor: gates?.p95_factor ?? ROLLOUT_DEFAULTS.gates.p95_factor,
      progress_deadline_s: gates?.progress_deadline ?? ROLLOUT_DEFAULTS.gates.progress_deadline_s,
    },
    rollback: rollout?.rollback ?? ROLLOUT_DEFAULTS.rollback,
    drain_timeout_s: rollout?.drain_timeout ?? ROLLOUT_DEFAULTS.drain_timeout_s,
  };
}

/** The written probes with dstack's defaults; without any, the model's chat-completion probe where it applies. */
function planProbes(probes: readonly ProbeInput[] | null | undefined, model: ServiceModel | null | undefined, modelProbe: boolean): ServiceProbe[] {
  if (probes !== null && probes !== undefined) {
    return probes.map((p) => ({
      type: 'http',
      url: p.url ?? PROBE_DEFAULTS.url,
      method: p.method ?? PROBE_DEFAULTS.method,
      headers: (p.headers ?? []).map((h) => ({ name: h.name, value: h.value })),
      body: p.body ?? null,
      timeout_s: p.timeout ?? PROBE_DEFAULTS.timeout_s,
      interval_s: p.interval ?? PROBE_DEFAULTS.interval_s,
      ready_after: p.ready_after ?? PROBE_DEFAULTS.ready_after,
      until_ready: p.until_ready ?? PROBE_DEFAULTS.until_ready,
    }));
  }
  if (!model || !modelProbe) return [];
  return [
    {
      type: 'http',
      url: `${model.prefix.replace(/\/+$/, '')}/chat/completions`,
      method: 'post',
      headers: [{ name: 'Content-Type', value: 'application/json' }],
      // Spaced as dstack writes it (Python's json.dumps), so both send the same bytes.
      body: `{"model": ${JSON.stringify(model.name)}, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}`,
      timeout_s: MODEL_PROBE_TIMEOUT_S,
      interval_s: PROBE_DEFAULTS.interval_s,
      ready_after: PROBE_DEFAULTS.ready_after,
      until_ready: PROBE_DEFAULTS.until_ready,
    },
  ];
}
