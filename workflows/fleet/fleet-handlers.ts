import { condition, setHandler } from '@temporalio/workflow';
import { allocate, applySpec, closeSubmission, heldHost, holdersOf, release, releaseJobHost, validateSpec } from './fleet-hosts';
import {
  allocateHostsUpdate,
  applyFleetUpdate,
  closeSubmissionUpdate,
  deleteFleetUpdate,
  fleetStateQuery,
  releaseHostsUpdate,
  releaseJobHostUpdate,
  type FleetHostState,
  type FleetState,
} from '../../src/contract/fleet-messages';
import type { AllocateRequestSchema, FleetSpecSchema } from '../../src/contract/fleet-schemas';

/** One fleet as plain data: its state, the hosts waiting for a probe and the apply rounds asked for and done. */
export interface Fleet {
  state: FleetState;
  pending: Set<FleetHostState>;
  /** An apply returns once its round of probes is done. */
  requestedRound: number;
  completedRound: number;
}

export interface FleetSchemas {
  AllocateRequestSchema: typeof AllocateRequestSchema;
  FleetSpecSchema: typeof FleetSpecSchema;
}

/** The fleet's query and Updates, handled one at a time: two runs can never get the same host. */
export function setFleetHandlers(fleet: Fleet, { AllocateRequestSchema, FleetSpecSchema }: FleetSchemas): void {
  const { state } = fleet;
  setHandler(fleetStateQuery, () => state);
  setHandler(
    applyFleetUpdate,
    async (spec) => {
      applySpec(state, spec, fleet.pending);
      const round = ++fleet.requestedRound;
      await condition(() => fleet.completedRound >= round || state.deleted);
      return state;
    },
    { validator: (spec) => validateSpec(state, FleetSpecSchema.parse(spec)) },
  );
  setHandler(allocateHostsUpdate, (request) => allocate(state, AllocateRequestSchema.parse(request)), {
    validator: (request) => void AllocateRequestSchema.parse(request),
  });
  setHandler(closeSubmissionUpdate, ({ run_id, submission }) => {
    closeSubmission(state, run_id, submission);
    return state.hosts.filter((h) => h.holder?.run_id === run_id && h.holder.submission === submission).map(heldHost);
  });
  setHandler(releaseHostsUpdate, (request) => release(state, request));
  setHandler(releaseJobHostUpdate, (request) => releaseJobHost(state, request));
  setHandler(
    deleteFleetUpdate,
    () => {
      state.deleted = true;
    },
    {
      validator: ({ force }) => {
        const held = state.hosts.filter((h) => h.holder !== null);
        if (held.length > 0 && !force) {
          throw new Error(`fleet ${state.name} has ${held.length} host(s) held by runs (${holdersOf(held)}); stop them first, or force`);
        }
      },
    },
  );
}
