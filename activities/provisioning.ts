import { ApplicationFailure } from '@temporalio/common';
import { NoCapacityError, SubmissionClosedError, type Instance, type Room } from '../src/backends/backend';
import { FailureType } from '../workflows/failure-types';
import { backendFor } from './backend-lookup';
import { whileHeartbeating } from './heartbeat';
import type { BackendCall, BackendRegistry, ProvisionInput, RoomInput } from './types';

export function createProvisioningActivities(backends: BackendRegistry) {
  return {
    async describeBackend({ backend }: BackendCall): Promise<{ group_provisioning: boolean }> {
      return { group_provisioning: backendFor(backends, backend).groupProvisioning };
    },

    /** How many more nodes of a group the fleet has room for now (a resize asks before it changes anything). */
    async fleetRoom({ backend, request }: RoomInput): Promise<Room> {
      return await backendFor(backends, backend).room(request);
    },

    /** Places one job, or a group's batch; idempotent per (run, submission, job). */
    async provisionJobs({ backend, request }: ProvisionInput): Promise<Instance[]> {
      const target = backendFor(backends, backend);
      try {
        return await whileHeartbeating(() => target.provision(request));
      } catch (err) {
        if (err instanceof NoCapacityError) {
          throw ApplicationFailure.retryable(err.message, FailureType.NoCapacity);
        }
        if (err instanceof SubmissionClosedError) {
          throw ApplicationFailure.nonRetryable(err.message, FailureType.SubmissionClosed);
        }
        throw err;
      }
    },
  };
}
