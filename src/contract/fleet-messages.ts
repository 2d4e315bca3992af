import { defineQuery, defineUpdate } from '@temporalio/workflow';
import type { AllocateRequest, FleetSpec, FleetState, HeldHost } from './fleet-schemas';

/** What a fleet's workflow is asked and answers (the shapes' schemas: src/contract/fleet-schemas.ts, the fleet's contract). */
export type {
  AllocateRequest,
  FleetHostSpec,
  FleetHostState,
  FleetSpec,
  FleetState,
  Holder,
  HostKey,
  HostKeySource,
  HeldHost,
} from './fleet-schemas';

export interface FleetInput {
  spec: FleetSpec;
  /** Carried over by continue-as-new. */
  state?: FleetState;
  /**
   * Continue as new once the history has this many events (at least 20), besides when the server
   * suggests it: a test makes a fleet hand over early. Carried over by continue-as-new.
   */
  continue_as_new_after_events?: number;
}

export type AllocatedHost = HeldHost;

export interface SubmissionRef {
  run_id: string;
  submission: number;
}

export interface ReleaseRequest extends SubmissionRef {
  /**
   * Hosts that could not be reached for the clean-up (lost mid-run): marked unreachable with the
   * reason, so no run is placed on them until the fleet is applied again.
   */
  lost?: Array<{ host_index: number; reason: string }>;
}

/** One job attempt's host given back (a replaced or removed node); the submission stays open. */
export interface JobHostRelease extends SubmissionRef {
  job_num: number;
  /** Absent: attempt 0. */
  attempt?: number;
  /** Why its host could not be cleaned up (lost): then it is marked unreachable. */
  lost_reason?: string | null;
}

export const applyFleetUpdate = defineUpdate<FleetState, [FleetSpec]>('applyFleet');
export const allocateHostsUpdate = defineUpdate<AllocatedHost[], [AllocateRequest]>('allocateHosts');
/** Refuses any later allocation for the submission and returns the hosts it still holds. */
export const closeSubmissionUpdate = defineUpdate<HeldHost[], [SubmissionRef]>('closeSubmission');
/** Closes the submission (if not yet) and frees its hosts; returns how many were freed. */
export const releaseHostsUpdate = defineUpdate<number, [ReleaseRequest]>('releaseHosts');
/** Frees the host of one job attempt (if it holds one); returns how many were freed (0 or 1). */
export const releaseJobHostUpdate = defineUpdate<number, [JobHostRelease]>('releaseJobHost');
export const deleteFleetUpdate = defineUpdate<void, [{ force: boolean }]>('deleteFleet');
export const fleetStateQuery = defineQuery<FleetState>('fleetState');
