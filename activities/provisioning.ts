import { InstanceUnreachableError, NoCapacityError, SubmissionClosedError, type BackendCapabilities, type Instance, type Room } from '../src/backends/backend';
import { backendFor } from './backend-lookup';
import { whileHeartbeating } from './heartbeat';
import { workerMetrics } from '../src/metrics/troupe-metrics';
import type { BackendCall, BackendRegistry, ProvisionInput, RoomInput } from './types';

/** A bounded label for a failed provision() (troupe_provisioning_failures_total). */
function provisioningFailureReason(err: unknown): string {
  if (err instanceof NoCapacityError) return 'no_capacity';
  if (err instanceof SubmissionClosedError) return 'submission_closed';
  if (err instanceof InstanceUnreachableError) return 'unreachable';
  return 'error';
}

export function createProvisioningActivities(backends: BackendRegistry) {
  return {
    async describeBackend({ backend }: BackendCall): Promise<BackendCapabilities> {
      const target = backendFor(backends, backend);
      return { group_provisioning: target.groupProvisioning, provisions_on_worker: target.provisionsOnWorker === true };
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
        workerMetrics.provisioningFailures.inc({ backend, reason: provisioningFailureReason(err) });
        throw err;
      }
    },
  };
}
