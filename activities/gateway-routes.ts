import type { ApplicationFailure } from '@temporalio/common';
import { deleteServiceTable, gatewayInfo, GatewayAdminError, putServiceTable, serviceFigures, serviceInflight, type GatewayAdmin } from '../src/gateway/admin-client';
import type { GatewayInfo } from '../src/gateway/routing-table';
import type {
  DrainReplicasInput,
  DrainReplicasResult,
  PushServiceTableInput,
  PushServiceTableResult,
  ReadServiceFiguresInput,
  ReadServiceFiguresResult,
  RemoveServiceTableInput,
} from './types';
import { FailureType } from '../src/run-core/failure-table';
import { activityFailure } from './activity-failure';
import { whileHeartbeating } from './heartbeat';

/** How often a drain asks the gateways, and how long one answer may take. */
const DRAIN_POLL_MS = 100;
const DRAIN_POLL_TIMEOUT_MS = 2_000;

/**
 * A service's routing table, pushed to every gateway of this worker. The gateways are the data plane:
 * they serve from the table they hold, so a push that fails on one gateway leaves the others served,
 * and a retry is harmless (an equal generation replaces, a lower one is refused as stale).
 */

/** Where a gateway serves a run: by path on its data plane, and by Host where it has a domain (data-plane.ts routeOf). */
export function serviceEndpoints(info: GatewayInfo, run: string): string[] {
  const dataPlane = new URL(info.data_plane_url);
  const byPath = `${dataPlane.origin}/services/${run}/`;
  if (info.domain === null) return [byPath];
  // The Host names the run; the port is still the data plane's (none shown when it is the scheme's own).
  const byHost = `${dataPlane.protocol}//${run}.${info.domain.toLowerCase()}${dataPlane.port ? `:${dataPlane.port}` : ''}/`;
  return [byPath, byHost];
}

/**
 * Every gateway's failure as one Temporal failure: a refusal (4xx) is not retried, since the same table
 * would be refused again; otherwise (no answer, 5xx) it is, and the message names the gateways that failed.
 */
function gatewaysFailed(what: string, total: number, errors: unknown[]): ApplicationFailure {
  const known = errors.map((err) => (err instanceof GatewayAdminError ? err : new GatewayAdminError('(unknown gateway)', 'unreachable', null, err instanceof Error ? err.message : String(err))));
  const refused = known.filter((e) => e.failure === 'refused');
  const shown = (list: GatewayAdminError[]) => list.map((e) => e.message).join('; ');
  const others = total - errors.length;
  const tail = others > 0 ? ` (the other ${others} gateway(s) took it)` : '';
  if (refused.length > 0) return activityFailure(FailureType.GatewayRefused, `${what} refused: ${shown(refused)}${tail}`);
  return activityFailure(FailureType.GatewayUnreachable, `${what} failed on ${known.map((e) => e.adminUrl).join(', ')}: ${shown(known)}${tail}`);
}

function rejections(results: PromiseSettledResult<unknown>[]): unknown[] {
  return results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason as unknown);
}

/** The table on one gateway, and where it serves; the PUT's failure is the one told when both calls fail. */
async function pushTo(gateway: GatewayAdmin, table: PushServiceTableInput['table']): Promise<GatewayInfo> {
  const [put, info] = await Promise.allSettled([putServiceTable(gateway, table), gatewayInfo(gateway)]);
  if (put.status === 'rejected') throw put.reason;
  if (info.status === 'rejected') throw info.reason;
  return info.value;
}

export function createGatewayRouteActivities(gateways: readonly GatewayAdmin[]) {
  return {
    /** PUT the table on every gateway of this worker, in parallel; returns each gateway's public endpoints of this service. */
    async pushServiceTable({ table }: PushServiceTableInput): Promise<PushServiceTableResult> {
      if (gateways.length === 0) {
        throw activityFailure(
          FailureType.NoGateway,
          `service ${table.run} cannot be served: this worker has no gateway: start \`troupe gateway\` and give the worker --gateway ADMIN_URL (or env TROUPE_GATEWAYS)`,
        );
      }
      // A stale answer is success: the gateway holds a newer table of this run, pushed by a later attempt.
      const results = await Promise.allSettled(gateways.map((gateway) => pushTo(gateway, table)));
      const failed = rejections(results);
      if (failed.length > 0) throw gatewaysFailed(`the routing table of service ${table.run} (generation ${table.generation})`, gateways.length, failed);
      const infos = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
      return { endpoints: [...new Set(infos.flatMap((info) => serviceEndpoints(info, table.run)))] };
    },

    /**
     * Waits until no gateway has a request in flight to these replicas (the run's table no longer
     * lists them), or `timeout_s` passed: what is still in flight then, and the gateways that did not
     * answer meanwhile.
     */
    async drainReplicas({ run, urls, timeout_s }: DrainReplicasInput): Promise<DrainReplicasResult> {
      const deadline = Date.now() + timeout_s * 1000;
      return whileHeartbeating(async () => {
        for (;;) {
          const answers = await Promise.allSettled(gateways.map((gateway) => serviceInflight(gateway, run, DRAIN_POLL_TIMEOUT_MS)));
          const left = answers.reduce((sum, a) => sum + (a.status === 'fulfilled' ? urls.reduce((n, url) => n + (a.value.get(url) ?? 0), 0) : 0), 0);
          const silent = answers.flatMap((a, i) => (a.status === 'rejected' ? [gateways[i]?.url ?? '?'] : []));
          if ((left === 0 && silent.length === 0) || Date.now() >= deadline) return { left, silent_gateways: silent };
          await new Promise((resolve) => setTimeout(resolve, DRAIN_POLL_MS));
        }
      });
    },

    /** The service's figures per revision and entry group over the window, from every gateway that answers; none answering fails (retried). */
    async readServiceFigures({ run, window_s }: ReadServiceFiguresInput): Promise<ReadServiceFiguresResult> {
      const answers = await Promise.allSettled(gateways.map((gateway) => serviceFigures(gateway, run, window_s, DRAIN_POLL_TIMEOUT_MS)));
      const failed = rejections(answers);
      if (gateways.length === 0 || failed.length === gateways.length) throw gatewaysFailed(`the figures of service ${run}`, gateways.length, failed);
      const byRevision = new Map<number, ReadServiceFiguresResult['revisions'][number]>();
      const byGroup = new Map<string, ReadServiceFiguresResult['groups'][number]>();
      let held = 0;
      let heldTotal = 0;
      for (const answer of answers) {
        if (answer.status !== 'fulfilled' || answer.value === null) continue;
        held += answer.value.held;
        heldTotal += answer.value.held_total;
        for (const r of answer.value.revisions) {
          const seen = byRevision.get(r.revision) ?? { revision: r.revision, requests: 0, errors: 0, p95_ms: null };
          const p95 = r.latency_p95_ms === null ? seen.p95_ms : Math.max(seen.p95_ms ?? 0, r.latency_p95_ms);
          byRevision.set(r.revision, { revision: r.revision, requests: seen.requests + r.requests, errors: seen.errors + r.errors, p95_ms: p95 });
        }
        // Each gateway sees its own requests: a group's figures are the sum over the gateways.
        for (const g of answer.value.groups) {
          const key = `${g.revision}/${g.group}`;
          const seen = byGroup.get(key) ?? { revision: g.revision, group: g.group, requests: 0, inflight: 0 };
          byGroup.set(key, { ...seen, requests: seen.requests + g.requests, inflight: seen.inflight + g.inflight });
        }
      }
      const silent = answers.flatMap((a, i) => (a.status === 'rejected' ? [gateways[i]?.url ?? '?'] : []));
      return { revisions: [...byRevision.values()].sort((a, b) => a.revision - b.revision), groups: [...byGroup.values()], held, held_total: heldTotal, silent_gateways: silent };
    },

    /** DELETE the run's table on every gateway. */
    async removeServiceTable({ run }: RemoveServiceTableInput): Promise<void> {
      // No gateway here: nothing this worker could have pushed to.
      const failed = rejections(await Promise.allSettled(gateways.map((gateway) => deleteServiceTable(gateway, run))));
      if (failed.length > 0) throw gatewaysFailed(`removing the routing table of service ${run}`, gateways.length, failed);
    },
  };
}
