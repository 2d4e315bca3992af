import {
  ApplicationFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { TroupeActivities } from '../activities';
import { compareHostSize, formatRange, hostShortfalls } from '../src/fleet/host-match';
import type { Resources } from '../src/config/resources-schema';
import { FailureType } from './failure-types';
import {
  AllocateRequestSchema,
  FleetSpecSchema,
  allocateHostsUpdate,
  applyFleetUpdate,
  deleteFleetUpdate,
  fleetStateQuery,
  releaseHostsUpdate,
  type AllocatedHost,
  type FleetHostSpec,
  type FleetHostState,
  type FleetInput,
  type FleetSpec,
  type FleetState,
} from './fleet-messages';

const { probeFleetHost } = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '2m',
  retry: { maximumAttempts: 2 },
});

/** How many released submissions are remembered (to refuse a late allocation for them). */
const CLOSED_MEMORY = 2_000;

/**
 * One fleet of SSH hosts, for as long as it exists: what each host has and which job holds it.
 * Taking and releasing hosts are Updates handled one at a time by this workflow, so two runs can
 * never get the same host. Hosts are probed (key verified, resources detected) when the fleet is
 * applied.
 */
export async function FleetWorkflow(input: FleetInput): Promise<FleetState> {
  const state: FleetState = input.state ?? {
    name: input.spec.name,
    placement: input.spec.placement,
    hosts: [],
    closed_submissions: [],
    deleted: false,
  };
  if (!input.state) applySpec(state, input.spec);

  setHandler(fleetStateQuery, () => state);
  setHandler(
    applyFleetUpdate,
    async (spec) => {
      applySpec(state, spec);
      await condition(() => state.hosts.every((h) => h.status !== 'probing'));
      return state;
    },
    { validator: (spec) => validateSpec(state, spec) },
  );
  setHandler(allocateHostsUpdate, (request) => allocate(state, request), {
    validator: (request) => void AllocateRequestSchema.parse(request),
  });
  setHandler(releaseHostsUpdate, ({ run_id, submission }) => release(state, run_id, submission));
  setHandler(
    deleteFleetUpdate,
    () => {
      state.deleted = true;
    },
    {
      validator: ({ force }) => {
        const held = state.hosts.filter((h) => h.holder !== null);
        if (held.length > 0 && !force) {
          throw new Error(`fleet ${state.name} has ${held.length} host(s) held by runs (${holdersOf(held)}); stop them first or force`);
        }
      },
    },
  );

  while (!state.deleted) {
    await condition(() => state.deleted || state.hosts.some((h) => h.status === 'probing') || workflowInfo().continueAsNewSuggested);
    await probeHosts(state);
    if (workflowInfo().continueAsNewSuggested && !state.deleted) {
      await condition(allHandlersFinished);
      await continueAsNew<typeof FleetWorkflow>({ spec: specOf(state), state });
    }
  }
  await condition(allHandlersFinished);
  return state;
}

function specOf(state: FleetState): FleetSpec {
  return { name: state.name, placement: state.placement, hosts: state.hosts.map((h) => h.spec) };
}

function hostKey(spec: FleetHostSpec): string {
  return `${spec.target.user}@${spec.target.hostname}:${spec.target.port}`;
}

function validateSpec(state: FleetState, spec: FleetSpec): void {
  FleetSpecSchema.parse(spec);
  if (spec.name !== state.name) throw new Error(`fleet name ${spec.name} does not match ${state.name}`);
  const kept = new Set(spec.hosts.map(hostKey));
  const dropped = state.hosts.filter((h) => h.holder !== null && !kept.has(hostKey(h.spec)));
  if (dropped.length > 0) throw new Error(`hosts still held by runs cannot be removed: ${holdersOf(dropped)}`);
}

/** New or changed hosts are (re)probed; unchanged hosts keep their facts, pinned key and holder. */
function applySpec(state: FleetState, spec: FleetSpec): void {
  const previous = new Map(state.hosts.map((h) => [hostKey(h.spec), h]));
  state.placement = spec.placement;
  state.hosts = spec.hosts.map((hostSpec, index): FleetHostState => {
    const old = previous.get(hostKey(hostSpec));
    const same = old && JSON.stringify(old.spec) === JSON.stringify(hostSpec);
    if (old && same && old.status === 'ready') return { ...old, index };
    return {
      index,
      spec: hostSpec,
      status: 'probing',
      reason: null,
      facts: null,
      internal_ip: null,
      // A pinned key survives re-applying the same host: a changed key must still be refused.
      host_key: old?.host_key ?? null,
      holder: old?.holder ?? null,
      probed_at: null,
    };
  });
}

async function probeHosts(state: FleetState): Promise<void> {
  const pending = state.hosts.filter((h) => h.status === 'probing');
  await Promise.all(
    pending.map(async (host) => {
      try {
        const result = await probeFleetHost({
          fleet: state.name,
          spec: host.spec,
          pinned_fingerprint: host.host_key?.source === 'pinned' ? host.host_key.fingerprint : null,
        });
        if (result.ok) {
          host.status = 'ready';
          host.reason = null;
          host.facts = result.facts;
          host.internal_ip = result.internal_ip;
          host.host_key = result.host_key;
        } else {
          host.status = 'unreachable';
          host.reason = result.reason;
        }
      } catch (err) {
        host.status = 'unreachable';
        host.reason = err instanceof Error ? err.message : String(err);
      }
      host.probed_at = new Date().toISOString();
    }),
  );
}

function allocate(state: FleetState, request: Parameters<typeof AllocateRequestSchema.parse>[0]): AllocatedHost[] {
  const req = AllocateRequestSchema.parse(request);
  const submissionKey = `${req.run_id}/${req.submission}`;
  if (state.closed_submissions.includes(submissionKey)) {
    throw ApplicationFailure.nonRetryable(`submission ${submissionKey} was already released`, FailureType.SubmissionClosed);
  }
  if (state.deleted) throw ApplicationFailure.nonRetryable(`fleet ${state.name} is being deleted`, FailureType.NoCapacity);
  const heldBy = (jobNum: number) =>
    state.hosts.find((h) => h.holder?.run_id === req.run_id && h.holder.submission === req.submission && h.holder.job_num === jobNum);

  const chosen = new Map<number, FleetHostState>();
  for (const job of req.jobs) {
    const held = heldBy(job.job_num);
    if (held) chosen.set(job.job_num, held);
  }
  const taken = new Set([...chosen.values()].map((h) => h.index));
  const candidates = state.hosts
    .filter((h) => h.status === 'ready' && h.holder === null && h.facts !== null && hostShortfalls(h.facts, req.resources).length === 0)
    .sort((a, b) => compareHostSize(a.facts!, b.facts!) || a.index - b.index);
  for (const job of req.jobs) {
    if (chosen.has(job.job_num)) continue;
    const host = candidates.find((h) => !taken.has(h.index));
    if (!host) throw noCapacity(state, req.group_name, req.resources, req.jobs.length);
    taken.add(host.index);
    chosen.set(job.job_num, host);
  }
  // All or nothing: holders are written only once every job of the request has a host.
  return req.jobs.map((job) => {
    const host = chosen.get(job.job_num)!;
    host.holder = { run_id: req.run_id, run_name: req.run_name, submission: req.submission, job_num: job.job_num, job_name: job.job_name };
    return {
      job_num: job.job_num,
      host_index: host.index,
      target: withVerifiedKey(host),
      internal_ip: host.internal_ip ?? host.spec.target.hostname,
      gpus: host.facts?.gpus.reduce((sum, g) => sum + g.count, 0) ?? 0,
    };
  });
}

/** The target with the key that was verified at probe time, so every later connection checks it. */
function withVerifiedKey(host: FleetHostState): FleetHostSpec['target'] {
  const fingerprints = host.host_key ? [host.host_key.fingerprint] : host.spec.target.host_key_fingerprints;
  return { ...host.spec.target, ...(fingerprints ? { host_key_fingerprints: fingerprints } : {}) };
}

function release(state: FleetState, runId: string, submission: number): number {
  const key = `${runId}/${submission}`;
  if (!state.closed_submissions.includes(key)) {
    state.closed_submissions.push(key);
    if (state.closed_submissions.length > CLOSED_MEMORY) state.closed_submissions.splice(0, state.closed_submissions.length - CLOSED_MEMORY);
  }
  let released = 0;
  for (const host of state.hosts) {
    if (host.holder?.run_id === runId && host.holder.submission === submission) {
      host.holder = null;
      released += 1;
    }
  }
  return released;
}

function holdersOf(hosts: FleetHostState[]): string {
  return hosts.map((h) => `${h.spec.target.hostname} by ${h.holder?.run_name}/job ${h.holder?.job_num}`).join(', ');
}

function noCapacity(state: FleetState, group: string, resources: Resources, wanted: number): ApplicationFailure {
  const why = state.hosts.map((h) => {
    const name = h.spec.target.hostname;
    if (h.status !== 'ready') return `${name}: ${h.status}${h.reason ? ` (${h.reason})` : ''}`;
    if (h.holder) return `${name}: held by ${h.holder.run_name}/job ${h.holder.job_num}`;
    const short = h.facts ? hostShortfalls(h.facts, resources) : ['not probed'];
    return short.length > 0 ? `${name}: ${short.join(', ')}` : `${name}: free`;
  });
  const needs = `cpu ${formatRange(resources.cpu.count)}, memory ${formatRange(resources.memory, 'GB')}, gpu ${
    resources.gpu.name ? `${resources.gpu.name.join('|')}:` : ''
  }${formatRange(resources.gpu.count)}`;
  return ApplicationFailure.retryable(
    `no capacity in fleet ${state.name} for group ${group} (${wanted} host(s) with ${needs}): ${why.join('; ')}`,
    FailureType.NoCapacity,
  );
}
