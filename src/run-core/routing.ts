import type { ReplicaVia, ServiceTableInput } from '../gateway/routing-table';
import { replicaRouteOf } from '../backends/ssh/jump-host';
import { SCALE_FROM_ZERO_HOLD_S, scalesFromZero, sleepsBehindRouter } from '../plan/scale-from-zero';
import type { Decision, Effect } from './effects';
import type { RunEvent } from './events';
import { activeJobs, isJobFinished } from './jobs';
import { drainingRanks } from './live';
import type { RunCore, ServiceCore } from './state';
import type { JobState } from '../contract/run-state';
import { canaryShare, keepsRevisionsApart, revisionOf, servingRevision } from './revisions';
import { hasCurrentBook } from './peers';

/**
 * A service's routing: the table every gateway routes its requests by (src/gateway/routing-table.ts),
 * made from the run's state — a replica is in it while it is READY on its current machine — and
 * pushed whenever its content changes, one push at a time, each with a higher generation (a gateway
 * refuses an older one, so a late push never undoes a newer). Once the submission's end is decided
 * the table lists no replica: new requests get 503 at once instead of a replica going away. A push
 * that fails is tried again after ROUTES_RETRY_MS, its problem shown as the run's message meanwhile.
 * Pure: the run's loop carries a push out and reports it back (`routes-pushed`).
 */

/** How long after a failed push the next one goes (the activity itself has retried for a while). */
export const ROUTES_RETRY_MS = 15_000;

/**
 * How often the table goes out again unchanged (the same generation: a gateway that has it keeps it).
 * A gateway that lost its tables (a new one, a wiped state file) serves the run again within this.
 */
export const ROUTES_REFRESH_MS = 60_000;

/** How long a replica being removed (a scale-down, a stop) may take to finish its requests in flight. */
export const DRAIN_TIMEOUT_S = 30;

export { SCALE_FROM_ZERO_HOLD_S };

/** How long the gateways hold a request of the service: the longest `scaling.hold` of its groups that scale from zero (default SCALE_FROM_ZERO_HOLD_S). */
function holdOf(core: RunCore): number {
  return Math.max(...core.plan.groups.filter((g) => scalesFromZero(core.plan, g)).map((g) => g.scaling?.hold_s ?? SCALE_FROM_ZERO_HOLD_S));
}

/** A service with a group that may have no replica (`replicas: 0..N`): the gateways hold its requests while one wakes. */
export function scalesToZero(core: RunCore): boolean {
  return core.plan.groups.some((g) => scalesFromZero(core.plan, g));
}


export function decideRouting(core: RunCore, event: RunEvent, now: number): Decision<RunCore> {
  const service = core.service;
  if (!service) return { state: core, effects: [] };
  const state = event.kind === 'routes-pushed' ? pushed(core, service, event, now) : core;
  return pushIfChanged(state, now);
}

/** When the loop must look again without an event: a failed push's retry, or the next refresh. */
export function routingDeadline(core: RunCore): number | null {
  const service = core.service;
  if (!service || service.pushing !== null || core.submission.ending !== null) return null;
  if (service.key !== service.delivered_key) return service.retry_at_ms;
  return service.pushed_at_ms === null ? null : service.pushed_at_ms + ROUTES_REFRESH_MS;
}

/** Every gateway has the table as the run's state makes it now, and no push is under way. */
export function routesSettled(core: RunCore): boolean {
  const service = core.service;
  return service === null || (service.pushing === null && service.delivered_key === JSON.stringify(tableOf(core)));
}

/** The table as the run's state makes it now, without its generation. */
export function tableOf(core: RunCore): Omit<ServiceTableInput, 'generation'> {
  const { plan } = core;
  const service = plan.service;
  if (!service) throw new Error(`run ${plan.run_name} is not a service`);
  const ending = core.submission.ending !== null;
  // A resize's ranks being drained are off the table already.
  const draining = drainingRanks(core.live);
  const jobs = activeJobs(core.run).filter((job) => !draining.has(job.job_num));
  const entry = service.entry.map((index) => plan.groups[index]?.name ?? String(index));
  const ready = (job: JobState) => job.ready_at !== null && !isJobFinished(job);
  // A group behind the router with no ready replica (scaled to zero, waking): the entry takes no request
  // of that pool, so the gateways hold them (hold_s) instead of the router answering 503; once it has
  // one, an entry replica takes requests once its node has the book that says so (the router reads it).
  const sleepers = plan.groups.filter((group) => sleepsBehindRouter(plan, group));
  const asleep = (visible: (job: JobState) => boolean) => sleepers.some((group) => !jobs.some((job) => job.group_index === group.index && visible(job) && ready(job)));
  const told = (job: JobState) => sleepers.length === 0 || !service.entry.includes(job.group_index) || hasCurrentBook(core, job);
  const pool = (visible: (job: JobState) => boolean) =>
    plan.groups.map((group) => ({
      name: group.name,
      replicas: ending || (service.entry.includes(group.index) && asleep(visible))
        ? []
        : jobs.flatMap((job) => {
            const url = job.group_index === group.index && visible(job) && ready(job) && told(job) ? replicaUrl(core, job) : null;
            const via = url ? replicaVia(job) : null;
            return url ? [{ url, state: 'ready' as const, ...(via ? { via } : {}) }] : [];
          }),
    }));
  // dstack's rolling: one pool, whatever revision a replica is of. Kept apart: a pool per revision running.
  const current = servingRevision(core);
  const share = canaryShare(core);
  const afterReady = (service.probes ?? []).filter((p) => !p.until_ready);
  const numbers = keepsRevisionsApart(plan) ? [...new Set([current, ...jobs.map((job) => revisionOf(core, job.job_num))])].sort((a, b) => a - b) : [current];
  return {
    run: plan.run_name,
    auth: service.auth,
    strip_prefix: service.strip_prefix,
    rate_limits: service.rate_limits,
    current_revision: current,
    // Once its end is decided, a request waits for nothing.
    ...(scalesToZero(core) && !ending ? { hold_s: holdOf(core) } : {}),
    // dstack probes a replica for its life unless `until_ready`: the gateways do after READY, and route around one that fails.
    ...(afterReady.length > 0 ? { probes: afterReady } : {}),
    revisions: numbers.map((number) => ({
      number,
      // A canary takes its share of new requests; the current revision the rest.
      ...(share && share.revision === number && number !== current ? { traffic: share.percent } : {}),
      entry,
      groups: pool(numbers.length === 1 ? () => true : (job) => revisionOf(core, job.job_num) === number),
    })),
  };
}

/** Where the gateways reach a replica (null: no machine yet, or not a service). */
export function replicaUrl(core: RunCore, job: JobState): string | null {
  const port = core.plan.service?.port;
  return job.instance && port !== undefined ? `http://${job.instance.internal_ip}:${port}` : null;
}

/**
 * How the gateways reach a replica on a host behind its fleet's proxy_jump (the replica's address is on the
 * jump host's private network): through an SSH tunnel over the jump host, with the gateway's own key. Null:
 * the gateways connect to the URL themselves.
 */
export function replicaVia(job: JobState): ReplicaVia | null {
  return job.instance?.internal_ip ? replicaRouteOf(job.instance.details, job.instance.internal_ip) : null;
}

function pushIfChanged(core: RunCore, now: number): Decision<RunCore> {
  const service = core.service;
  if (!service || service.pushing !== null) return { state: core, effects: [] };
  const table = tableOf(core);
  const key = JSON.stringify(table);
  const refresh = service.pushed_at_ms !== null && now >= service.pushed_at_ms + ROUTES_REFRESH_MS && core.submission.ending === null;
  if (key === service.delivered_key && !refresh) return { state: core, effects: [] };
  // The same content again (after a failure) keeps its generation: the gateways that took it take it again.
  const changed = key !== service.key;
  if (!changed && service.retry_at_ms !== null && now < service.retry_at_ms) return { state: core, effects: [] };
  const generation = changed ? service.generation + 1 : service.generation;
  const effect: Effect = { kind: 'push-routes', generation, table: { ...table, generation } };
  return { state: { ...core, service: { ...service, generation, key, pushing: generation, retry_at_ms: null } }, effects: [effect] };
}

function pushed(core: RunCore, service: ServiceCore, event: Extract<RunEvent, { kind: 'routes-pushed' }>, now: number): RunCore {
  if (service.pushing !== event.generation) return core;
  const problem = event.error === null ? null : `routing table v${event.generation} not on every gateway: ${event.error}`;
  if (core.run.message === service.problem) core.run.message = problem;
  if (event.error === null) {
    core.run.service = { rollout: null, ...core.run.service, endpoints: event.endpoints, auth: core.plan.service?.auth != null, table_generation: event.generation, deployment: service.deployment };
    return { ...core, service: { ...service, pushing: null, delivered_key: service.key, retry_at_ms: null, pushed_at_ms: now, problem } };
  }
  return { ...core, service: { ...service, pushing: null, retry_at_ms: now + ROUTES_RETRY_MS, problem } };
}
