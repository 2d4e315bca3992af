import { proxyActivities } from '@temporalio/workflow';
import type { TroupeActivities } from '../activities/types';
import type { Effect } from '../src/run-core/effects';
import { rootMessage } from './failures';
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
  retry: { initialInterval: '1s', maximumInterval: '10s', nonRetryableErrorTypes: ['NoGateway', 'GatewayRefused'] },
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
