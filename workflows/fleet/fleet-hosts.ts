import { ApplicationFailure } from '@temporalio/workflow';
import type { Resources } from '../../src/config/resources-schema';
import { describeResources, hostShortfalls, pickHosts } from '../../src/fleet/host-match';
import { FailureType } from '../../src/run-core/failure-table';
import { isHeldBy, type JobAttemptKey } from '../../src/fleet/job-holder';
import type { AllocateRequest, FleetHostSpec, FleetHostState, FleetSpec, FleetState, HeldHost, JobHostRelease, ReleaseRequest } from '../../src/contract/fleet-messages';

/** How a fleet's hosts change: applied specs, allocations and releases, as pure changes of its state. */

/** How many released submissions are remembered (to refuse a late allocation for them). */
const CLOSED_MEMORY = 2_000;

export function specOf(state: FleetState): FleetSpec {
  return { name: state.name, placement: state.placement, hosts: state.hosts.map((h) => h.spec) };
}

function hostKey(spec: FleetHostSpec): string {
  return `${spec.target.user}@${spec.target.hostname}:${spec.target.port}`;
}

/** `spec` has passed its schema already. */
export function validateSpec(state: FleetState, spec: FleetSpec): void {
  if (spec.name !== state.name) throw new Error(`fleet name ${spec.name} does not match ${state.name}`);
  if (state.deleted) throw new Error(`fleet ${state.name} is being deleted`);
  const kept = new Set(spec.hosts.map(hostKey));
  const dropped = state.hosts.filter((h) => h.holder !== null && !kept.has(hostKey(h.spec)));
  if (dropped.length > 0) throw new Error(`hosts still held by runs cannot be removed: ${holdersOf(dropped)}`);
}

/**
 * Every host of the spec is (re)probed. A host already known keeps its state object (a probe in
 * flight still lands), its holder and its verified keys: a changed key must still be refused.
 */
export function applySpec(state: FleetState, spec: FleetSpec, pending: Set<FleetHostState>): void {
  const previous = new Map(state.hosts.map((h) => [hostKey(h.spec), h]));
  state.placement = spec.placement;
  for (const host of state.hosts) pending.delete(host);
  state.hosts = spec.hosts.map((hostSpec, index): FleetHostState => {
    const old = previous.get(hostKey(hostSpec));
    if (old) {
      const sameJump = JSON.stringify(old.spec.target.proxy_jump ?? null) === JSON.stringify(hostSpec.target.proxy_jump ?? null);
      old.index = index;
      old.spec = hostSpec;
      if (!sameJump) old.jump_host_key = null;
      pending.add(old);
      return old;
    }
    const fresh: FleetHostState = {
      index,
      spec: hostSpec,
      status: 'probing',
      reason: null,
      facts: null,
      internal_ip: null,
      host_key: null,
      jump_host_key: null,
      holder: null,
      probed_at: null,
    };
    pending.add(fresh);
    return fresh;
  });
}

/** `req` has passed its schema already (its defaults filled in). */
export function allocate(state: FleetState, req: AllocateRequest): HeldHost[] {
  const submissionKey = `${req.run_id}/${req.submission}`;
  if (state.closed_submissions.includes(submissionKey)) {
    throw ApplicationFailure.nonRetryable(`submission ${submissionKey} was already released`, FailureType.SubmissionClosed);
  }
  if (state.deleted) throw ApplicationFailure.retryable(`fleet ${state.name} is being deleted`, FailureType.NoCapacity);
  // Idempotent: a job attempt that already holds a host keeps it; only the others get new ones
  // (a replacement gets another host than the attempt before it, which still holds its own).
  const key = (job: { job_num: number; attempt?: number }) => `${job.job_num}/${job.attempt ?? 0}`;
  const chosen = new Map<string, FleetHostState>();
  for (const job of req.jobs) {
    const held = heldBy(state, { run_id: req.run_id, submission: req.submission, ...job });
    if (held) chosen.set(key(job), held);
  }
  const missing = req.jobs.filter((job) => !chosen.has(key(job)));
  if (missing.length > 0) {
    const taken = new Set([...chosen.values()].map((h) => h.index));
    const picked = pickHosts(state.hosts, req.resources, missing.length, taken);
    if (!picked) throw noCapacity(state, req.group_name, req.resources, missing.length);
    missing.forEach((job, i) => chosen.set(key(job), picked[i] as FleetHostState));
  }
  // All or nothing: holders are written only once every job of the request has a host.
  return req.jobs.map((job) => {
    const host = chosen.get(key(job)) as FleetHostState;
    host.holder = {
      run_id: req.run_id,
      ...(req.run_workflow_id ? { run_workflow_id: req.run_workflow_id } : {}),
      run_name: req.run_name,
      submission: req.submission,
      job_num: job.job_num,
      job_name: job.job_name,
      // Attempt 0 holds as before attempts existed (same state, same Update results).
      ...(job.attempt ? { attempt: job.attempt } : {}),
    };
    return heldHost(host);
  });
}

/** The host a job attempt holds. */
function heldBy(state: FleetState, job: JobAttemptKey): FleetHostState | undefined {
  return state.hosts.find((h) => isHeldBy(h.holder, job));
}

export function heldHost(host: FleetHostState): HeldHost {
  const attempt = host.holder?.attempt;
  return {
    run_name: host.holder?.run_name ?? '',
    job_num: host.holder?.job_num ?? -1,
    job_name: host.holder?.job_name ?? '',
    ...(attempt ? { attempt } : {}),
    host_index: host.index,
    target: withVerifiedKeys(host),
    internal_ip: host.internal_ip ?? host.spec.target.hostname,
    gpus: host.facts?.gpus.reduce((sum, g) => sum + g.count, 0) ?? 0,
    home: host.facts?.home ?? '',
  };
}

/** The target whose only accepted keys are the ones verified at probe time (the jump host's too). */
function withVerifiedKeys(host: FleetHostState): FleetHostSpec['target'] {
  const { target } = host.spec;
  const fingerprints = host.host_key ? [host.host_key.fingerprint] : target.host_key_fingerprints;
  const jump = target.proxy_jump
    ? { ...target.proxy_jump, ...(host.jump_host_key ? { host_key_fingerprints: [host.jump_host_key.fingerprint] } : {}) }
    : undefined;
  return { ...target, ...(fingerprints ? { host_key_fingerprints: fingerprints } : {}), ...(jump ? { proxy_jump: jump } : {}) };
}

export function closeSubmission(state: FleetState, runId: string, submission: number): void {
  const key = `${runId}/${submission}`;
  if (state.closed_submissions.includes(key)) return;
  state.closed_submissions.push(key);
  if (state.closed_submissions.length > CLOSED_MEMORY) state.closed_submissions.splice(0, state.closed_submissions.length - CLOSED_MEMORY);
}

export function release(state: FleetState, { run_id, submission, lost }: ReleaseRequest): number {
  closeSubmission(state, run_id, submission);
  let released = 0;
  for (const host of state.hosts) {
    if (host.holder?.run_id !== run_id || host.holder.submission !== submission) continue;
    freeHost(host, lost?.find((l) => l.host_index === host.index)?.reason ?? null);
    released += 1;
  }
  return released;
}

/** Frees the host of one job attempt alone; the submission stays open (its other jobs run on). */
export function releaseJobHost(state: FleetState, req: JobHostRelease): number {
  const host = heldBy(state, req);
  if (!host) return 0;
  freeHost(host, req.lost_reason ?? null);
  return 1;
}

/** A host given back; one that could not be cleaned up (`lostReason`) is marked unreachable until the fleet is applied again. */
function freeHost(host: FleetHostState, lostReason: string | null): void {
  if (lostReason !== null && host.holder) {
    host.status = 'unreachable';
    host.reason = `lost while ${host.holder.run_name}/job ${host.holder.job_num} ran on it (${lostReason}); apply the fleet again to probe it`;
  }
  host.holder = null;
}

export function holdersOf(hosts: FleetHostState[]): string {
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
  return ApplicationFailure.retryable(
    `no capacity in fleet ${state.name} for group ${group} (${wanted} more host(s) with ${describeResources(resources)}): ${why.join('; ')}`,
    FailureType.NoCapacity,
  );
}
