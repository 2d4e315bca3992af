import { expandJobs } from './expand';
import { PlanSchema, type GroupPlan, type Plan, type ReadyProbe } from './plan-schema';
import type { ReplicaGroupPlan, ServicePlan, ServiceProbe } from './service-plan-schema';

/**
 * A service as a run: each replica group becomes a group of the run's rank space, its replicas its
 * nodes (MIN at start, up to MAX by `troupe scale`), and the plan says what the run pushes to the
 * gateways (plan.service). A replica takes requests once it is READY: its group's `ready` probe
 * where it has one (Troupe's extension), else the service's first probe, else its port accepting
 * connections.
 */

/** How long a replica may take to pass its probe after its commands start (a model can take minutes to load). */
export const SERVICE_READY_TIMEOUT_S = 900;

export class ServiceRunError extends Error {}

/**
 * The run's plan of a service. `tokenSha256`: the hashes of the tokens that may call it (null when
 * `auth: false`); the gateway keeps only these, and so does the run's input.
 */
export function serviceRunPlan(service: ServicePlan, tokenSha256: readonly string[] | null): Plan {
  if (service.auth && (tokenSha256 === null || tokenSha256.length === 0)) throw new ServiceRunError('a service with auth needs at least one token hash');
  const router = service.router_group;
  const groups = service.groups.map((g) => groupOf(service, g));
  return PlanSchema.parse({
    run_name: service.run_name,
    nodes_num: groups.reduce((sum, g) => sum + g.nodes, 0),
    image: service.groups[0]?.image ?? null,
    working_dir: service.working_dir,
    env: service.env,
    secret_env: service.secret_env,
    startup_order: service.startup_order,
    stop_criteria: 'all-done',
    retry: null,
    max_duration_s: null,
    fleets: service.fleets,
    groups,
    jobs: expandJobs(service.run_name, groups, service.revision),
    service: {
      revision: service.revision,
      port: service.port,
      auth: service.auth && tokenSha256 ? { token_sha256: [...tokenSha256] } : null,
      strip_prefix: service.strip_prefix,
      rate_limits: service.rate_limits,
      // dstack: requests enter by the router group where there is one, else by every group.
      entry: router === null ? groups.map((g) => g.index) : [router],
      rollout: service.rollout,
      // The gateways probe only entry replicas after READY, by their group's probes (every group's are the service's, a router's may be the model's).
      probes: service.groups[router ?? 0]?.probes ?? [],
    },
  } satisfies Plan);
}

function groupOf(service: ServicePlan, group: ReplicaGroupPlan): GroupPlan {
  const { min, max } = group.replicas;
  return {
    index: group.index,
    name: group.name,
    nodes: min,
    resources: group.resources,
    commands: group.commands,
    ports: [],
    depends_on: group.depends_on ?? [],
    ready: group.ready ?? replicaProbe(service.port, group.probes[0]),
    ready_min: group.ready_min ?? null,
    nodes_range: max > min ? { min, max } : null,
    on_failure: group.on_failure ?? null,
    on_dependency_restart: group.on_dependency_restart ?? 'keep',
    on_peers_change: group.on_peers_change ?? null,
    scaling: max > min ? group.scaling : null,
  };
}

const HTTP_METHOD = { get: 'GET', post: 'POST', put: 'PUT', delete: 'DELETE', patch: 'PATCH', head: 'HEAD' } as const;

/** The service's probe as a readiness probe run on the replica (its port accepting connections without one). */
function replicaProbe(port: number, probe: ServiceProbe | undefined): ReadyProbe {
  if (!probe) return { check: { kind: 'tcp', port }, interval_s: 1, timeout_s: SERVICE_READY_TIMEOUT_S };
  return {
    check: {
      kind: 'http',
      port,
      path: probe.url,
      method: HTTP_METHOD[probe.method],
      headers: probe.headers,
      body: probe.body,
    },
    // dstack probes every `interval` (15 s by default) for as long as the replica lives; Troupe probes
    // until the replica is READY, every second, so a replica takes requests as soon as it can.
    interval_s: 1,
    timeout_s: SERVICE_READY_TIMEOUT_S,
  };
}
