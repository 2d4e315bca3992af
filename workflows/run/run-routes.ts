import { proxyActivities } from '@temporalio/workflow';
import type { TroupeActivities } from '../../activities';
import { FailureType } from '../../src/run-core/failure-table';
import type { Effect } from '../../src/run-core/effects';
import { activeJobs, isJobFinished } from '../../src/run-core/jobs';
import { DRAIN_TIMEOUT_S, replicaUrl, routesSettled } from '../../src/run-core/routing';
import { rootMessage } from '../failures';
import type { Run } from './run-context';

/**
 * A service's routing table on the gateways, as the core decided it (src/run-core/routing.ts): the
 * push runs beside the loop, which hears back with a `routes-pushed` event; at the run's end the
 * table is removed, after the last push has landed (a late push must not bring it back).
 */

/** A gateway that does not answer is tried for about a minute; then the core tries again later. */
const gatewayActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '20s',
  scheduleToCloseTimeout: '90s',
  retry: { initialInterval: '1s', maximumInterval: '10s', nonRetryableErrorTypes: [FailureType.NoGateway, FailureType.GatewayRefused] },
});

/** A reading of the figures is due again within a second or two: a short try, then the core asks again. */
const figuresActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '5s',
  scheduleToCloseTimeout: '10s',
  retry: { initialInterval: '500ms', maximumInterval: '2s', nonRetryableErrorTypes: [FailureType.NoGateway] },
});

/** A drain polls the gateways for up to its timeout, heartbeating. */
const drainActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '5m',
  heartbeatTimeout: '10s',
  retry: { initialInterval: '1s', maximumInterval: '5s', maximumAttempts: 3 },
});

export function pushRoutes(run: Run, effect: Extract<Effect, { kind: 'push-routes' }>): void {
  const { generation, table } = effect;
  const ready = table.revisions.reduce((sum, r) => sum + r.groups.reduce((n, g) => n + g.replicas.length, 0), 0);
  const push = gatewayActivities.pushServiceTable
    .executeWithOptions({ summary: `routing table v${generation}: ${ready} ready replica${ready === 1 ? '' : 's'}` }, [{ table }])
    .then(
      ({ endpoints }) => run.inbox.push({ kind: 'routes-pushed', generation, endpoints, error: null }),
      (err: unknown) => run.inbox.push({ kind: 'routes-pushed', generation, endpoints: [], error: rootMessage(err) }),
    );
  run.routesPushed = Promise.all([run.routesPushed, push]).then(() => undefined);
}

/** A resize's replicas drained on the gateways; the loop hears back with `drained` (a drain that cannot be asked is over, with its error). */
export function drainReplicas(run: Run, effect: Extract<Effect, { kind: 'drain' }>): void {
  const { resize, urls, timeout_s } = effect;
  void drainActivities.drainReplicas
    .executeWithOptions({ summary: `drain ${urls.length} replica${urls.length === 1 ? '' : 's'}` }, [{ run: run.state.run_name, urls, timeout_s }])
    .then(
      ({ left }) => run.inbox.push({ kind: 'drained', id: resize, left, error: null }),
      (err: unknown) => run.inbox.push({ kind: 'drained', id: resize, left: 0, error: rootMessage(err) }),
    );
}

/** Gate A's synthetic requests: each bounded by its timeout; one try more if the worker went away meanwhile. */
const checkActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '6m',
  heartbeatTimeout: '10s',
  retry: { initialInterval: '1s', maximumAttempts: 2 },
});

/** A rollout's gate A (a synthetic request to each new entry replica); the loop hears back with `revision-checked`. */
export function checkRevision(run: Run, effect: Extract<Effect, { kind: 'check-revision' }>): void {
  const { revision, round, urls, probe } = effect;
  void checkActivities.checkRevision
    .executeWithOptions({ summary: `gate A of revision ${revision}, round ${round}: ${urls.length} entry replica${urls.length === 1 ? '' : 's'}` }, [{ urls, probe, run: run.state.run_name, revision }])
    .then(
      ({ error, note }) => run.inbox.push({ kind: 'revision-checked', revision, round, note, error }),
      (err: unknown) => run.inbox.push({ kind: 'revision-checked', revision, round, note: null, error: rootMessage(err) }),
    );
}

/** A service's figures read on the gateways (a canary's gate, the autoscaler); the loop hears back with `figures` (one that cannot be read, with its error). */
export function readFigures(run: Run, effect: Extract<Effect, { kind: 'read-figures' }>): void {
  const { purpose, window_s } = effect;
  void figuresActivities.readServiceFigures
    .executeWithOptions({ summary: `${purpose === 'canary' ? "the canary's" : 'autoscaling'} figures of the last ${window_s} s` }, [{ run: run.state.run_name, window_s }])
    .then(
      ({ revisions, groups, held, held_total }) => run.inbox.push({ kind: 'figures', purpose, window_s, revisions, groups, held, held_total, error: null }),
      (err: unknown) => run.inbox.push({ kind: 'figures', purpose, window_s, revisions: [], groups: [], held: 0, held_total: 0, error: rootMessage(err) }),
    );
}

/** Replicas' own metrics read (a group behind the router sized on its own traffic); the loop hears back with `replica-metrics`. */
export function readReplicaMetrics(run: Run, effect: Extract<Effect, { kind: 'read-replica-metrics' }>): void {
  const { targets } = effect;
  const groups = [...new Set(targets.map((t) => run.core.plan.groups[t.group]?.name ?? String(t.group)))].join(', ');
  void figuresActivities.readReplicaMetrics
    .executeWithOptions({ summary: `${groups}: own traffic on ${targets.length} replica${targets.length === 1 ? '' : 's'}` }, [{ targets }])
    .then(
      ({ replicas }) => run.inbox.push({ kind: 'replica-metrics', replicas }),
      (err: unknown) => run.inbox.push({ kind: 'replica-metrics', replicas: targets.map((t) => ({ group: t.group, url: t.url, values: null, error: rootMessage(err) })) }),
    );
}

/**
 * Before a graceful teardown: the table that lists no replica on every gateway (the core decided it
 * with the run's end; `settle` feeds the answers of the pushes to the core), then the replicas'
 * requests in flight finished, DRAIN_TIMEOUT_S at most. Nothing here fails the teardown.
 */
export async function drainBeforeTeardown(run: Run, settle: () => void): Promise<void> {
  if (!run.core.service) return;
  for (let i = 0; i < 3 && !routesSettled(run.core); i++) {
    await run.routesPushed;
    settle();
  }
  const urls = activeJobs(run.state).flatMap((job) => (isJobFinished(job) ? [] : (replicaUrl(run.core, job) ?? [])));
  if (urls.length === 0) return;
  await drainActivities.drainReplicas
    .executeWithOptions({ summary: `drain ${urls.length} replica${urls.length === 1 ? '' : 's'} before teardown` }, [{ run: run.state.run_name, urls, timeout_s: DRAIN_TIMEOUT_S }])
    .catch(() => undefined);
}

/** The service's table off every gateway, once any push under way has landed; what fails goes to the run's message. */
export async function removeRoutes(run: Run): Promise<void> {
  if (!run.core.service) return;
  await run.routesPushed;
  try {
    await gatewayActivities.removeServiceTable({ run: run.state.run_name });
  } catch (err) {
    run.state.message = `${run.state.message ? `${run.state.message}; ` : ''}routing table not removed from every gateway: ${rootMessage(err)}`;
  }
}
