import { allHandlersFinished, condition, continueAsNew, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { TroupeActivities } from '../../activities';
import { setFleetHandlers, type Fleet } from './fleet-handlers';
import { applySpec, specOf } from './fleet-hosts';
import type { FleetHostState, FleetInput, FleetState } from '../../src/contract/fleet-messages';

const { probeFleetHost } = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '2m',
  retry: { maximumAttempts: 2 },
});

/** After a forced delete, how long the runs that held hosts get to give them back. */
const FORCED_DELETE_GRACE = '2 minutes';

/**
 * One fleet of SSH hosts, for as long as it exists: what each host has and which job holds it.
 * Taking and releasing hosts are Updates handled one at a time by this workflow (fleet-handlers.ts),
 * so two runs can never get the same host. Every apply probes every host again (key verified
 * against what was verified before, resources detected); hosts stay usable while they are re-probed.
 */
export async function FleetWorkflow(input: FleetInput): Promise<FleetState> {
  // Loaded here, not with the module: every new workflow of a worker evaluates the workflow modules
  // again, and zod's are most of that time. `eager` keeps it in the bundle: a microtask, on every replay.
  const schemas = await import(/* webpackMode: "eager" */ '../../src/contract/fleet-schemas');
  const state: FleetState = input.state ?? { name: input.spec.name, placement: input.spec.placement, hosts: [], closed_submissions: [], deleted: false };
  const fleet: Fleet = { state, pending: new Set(state.hosts.filter((h) => h.status === 'probing')), requestedRound: 0, completedRound: 0 };
  if (!input.state) {
    applySpec(state, input.spec, fleet.pending);
    fleet.requestedRound = 1;
  }
  setFleetHandlers(fleet, schemas);

  const handOverAfter = Math.max(20, input.continue_as_new_after_events ?? Number.POSITIVE_INFINITY);
  const historyIsLong = () => workflowInfo().continueAsNewSuggested || workflowInfo().historyLength >= handOverAfter;
  while (!state.deleted) {
    await condition(() => state.deleted || fleet.pending.size > 0 || historyIsLong());
    if (state.deleted) break;
    if (fleet.pending.size > 0) {
      const round = fleet.requestedRound;
      const batch = [...fleet.pending];
      fleet.pending.clear();
      await probeHosts(state, batch);
      fleet.completedRound = round;
      continue;
    }
    // An apply that arrives meanwhile waits for a probe: probe first, continue as new after.
    await condition(() => allHandlersFinished() || fleet.pending.size > 0 || state.deleted);
    if (fleet.pending.size > 0 || state.deleted) continue;
    await continueAsNew<typeof FleetWorkflow>({ spec: specOf(state), state, continue_as_new_after_events: input.continue_as_new_after_events });
  }
  // A forced delete: the runs holding hosts are being stopped; their teardown releases the hosts.
  await condition(() => state.hosts.every((h) => h.holder === null), FORCED_DELETE_GRACE);
  await condition(allHandlersFinished);
  return state;
}

async function probeHosts(state: FleetState, batch: FleetHostState[]): Promise<void> {
  await Promise.all(
    batch.map(async (host) => {
      let outcome: Awaited<ReturnType<typeof probeFleetHost>>;
      try {
        outcome = await probeFleetHost({
          fleet: state.name,
          spec: host.spec,
          host_key: host.host_key,
          jump_host_key: host.jump_host_key,
        });
      } catch (err) {
        outcome = { ok: false, reason: err instanceof Error ? err.message : String(err) };
      }
      // The host may have been dropped from the fleet while it was probed.
      if (!state.hosts.includes(host)) return;
      if (outcome.ok) {
        host.status = 'ready';
        host.reason = null;
        host.facts = outcome.facts;
        host.internal_ip = outcome.internal_ip;
        host.host_key = outcome.host_key;
        host.jump_host_key = outcome.jump_host_key;
      } else {
        host.status = 'unreachable';
        host.reason = outcome.reason;
      }
      host.probed_at = new Date().toISOString();
    }),
  );
}

