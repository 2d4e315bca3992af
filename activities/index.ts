import { createFleetActivities } from './fleet';
import { createJobBatchActivities } from './job-batches';
import { createJobActivities } from './jobs';
import { createPeersActivities } from './peers';
import { createProvisioningActivities } from './provisioning';
import { createRunIdentityActivities } from './run-identity';
import { createTeardownActivities } from './teardown';
import type { BackendRegistry, TroupeActivities } from './types';

export type * from './types';

export function createActivities(backends: BackendRegistry): TroupeActivities {
  return {
    ...createProvisioningActivities(backends),
    ...createJobActivities(backends),
    ...createJobBatchActivities(backends),
    ...createTeardownActivities(backends),
    ...createPeersActivities(backends),
    ...createFleetActivities(),
    ...createRunIdentityActivities(),
  };
}
