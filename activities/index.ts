import type { GatewayAdmin } from '../src/gateway/admin-client';
import { atTheBoundary } from './activity-failure';
import { createFleetActivities } from './fleet';
import { createGatewayRouteActivities } from './gateway-routes';
import { createSyntheticRequestActivities } from './synthetic-request';
import { createReplicaMetricsActivities } from './replica-metrics';
import { createJobBatchActivities } from './job-batches';
import { createJobActivities } from './jobs';
import { createPeersActivities } from './peers';
import { createProvisioningActivities } from './provisioning';
import { createRunIdentityActivities } from './run-identity';
import { createTeardownActivities } from './teardown';
import type { BackendRegistry } from './types';

export type * from './types';

export interface ActivityOptions {
  /** The gateways services' tables are pushed to, and a rollout's gate A sent through; none: pushServiceTable fails with NoGateway. */
  gateways?: readonly GatewayAdmin[];
}

/** Every activity a worker offers, by name: what the workflows' proxies are typed by (TroupeActivities). */
export function createActivities(backends: BackendRegistry, options: ActivityOptions = {}) {
  return atTheBoundary({
    ...createProvisioningActivities(backends),
    ...createJobActivities(backends),
    ...createJobBatchActivities(backends),
    ...createTeardownActivities(backends),
    ...createPeersActivities(backends),
    ...createFleetActivities(),
    ...createSyntheticRequestActivities(options.gateways ?? []),
    ...createReplicaMetricsActivities(),
    ...createRunIdentityActivities(),
    ...createGatewayRouteActivities(options.gateways ?? []),
  });
}

/** The activities as the workflows call them: their types are the implementation's, never written twice. */
export type TroupeActivities = ReturnType<typeof createActivities>;
