import { connect as netConnect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { Context } from '@temporalio/activity';
import type { Client as TemporalClient } from '@temporalio/client';
import { Client } from 'undici';
import { forwardThroughJump } from '../src/backends/ssh/jump-forward';
import { DIRECT_FIRST_TIMEOUT_MS, NO_ROUTE_CODES } from '../src/backends/ssh/jump-host';
import { SshTargetSchema, type SshTarget } from '../src/backends/ssh/target';
import { runJobsQuery } from '../src/contract/messages';
import { JOBS_PAGE_MAX, type JobState } from '../src/contract/run-state';

/**
 * Which replicas of a run sit on an SSH host behind its fleet's proxy_jump, and a connection to one
 * through the jump host, for the worker to reach them (its replica metrics, a rollout's gate A). The
 * run core gives the activities only a URL (the replica's internal address), so the activity looks the
 * address up in the run's own job records: the SSH backend wrote each host's target there
 * (`instance.details.target`: the fleet's host, its jump and the keys the fleet verified), which is
 * what it reaches the host by too.
 */

/**
 * By internal address: the SSH host a job of the run had there, when the worker may not reach that
 * address straight — a host behind a jump, or a host reached by another name than its private address
 * (`internal_ip`), which is tried straight first (dispatcherThroughJump). Pure.
 */
export function jumpedHostsOf(jobs: readonly JobState[]): Map<string, SshTarget> {
  const hosts = new Map<string, SshTarget>();
  // Live jobs last: what a replica has now wins over what an earlier one had at that address.
  const ordered = [...jobs.filter((j) => j.removed), ...jobs.filter((j) => !j.removed)];
  for (const job of ordered) {
    const instance = job.instance;
    if (!instance?.internal_ip) continue;
    const target = sshTargetOf(instance.details);
    if (target && (target.proxy_jump || target.hostname !== instance.internal_ip)) hosts.set(instance.internal_ip, target);
    else hosts.delete(instance.internal_ip);
  }
  return hosts;
}

function sshTargetOf(details: Readonly<Record<string, string>>): SshTarget | null {
  if (details.target === undefined) return null;
  try {
    const parsed = SshTargetSchema.safeParse(JSON.parse(details.target));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/** Every internal address the run's jobs have (behind a jump or not): what a lookup answered for. */
function addressesOf(jobs: readonly JobState[]): Set<string> {
  return new Set(jobs.flatMap((j) => (j.instance?.internal_ip ? [j.instance.internal_ip] : [])));
}

/** The run's jobs, a page at a time (its `runJobs` query). */
export async function runJobsOf(client: TemporalClient, runWorkflowId: string): Promise<JobState[]> {
  const handle = client.workflow.getHandle(runWorkflowId);
  const jobs: JobState[] = [];
  for (;;) {
    const page = await handle.query(runJobsQuery, { offset: jobs.length, limit: JOBS_PAGE_MAX });
    jobs.push(...page);
    if (page.length < JOBS_PAGE_MAX) return jobs;
  }
}

/** A lookup is kept this long (a reading every 2 s need not query the run each time). */
export const JUMP_LOOKUP_TTL_MS = 60_000;

/** Per run: its jumped hosts, asked again when an address it did not know turns up or the answer is old. */
export class ReplicaJumps {
  private readonly known = new Map<string, { at: number; addresses: Set<string>; hosts: Map<string, SshTarget> }>();

  constructor(private readonly jobsOf: (runWorkflowId: string) => Promise<JobState[]>) {}

  async hostsFor(runWorkflowId: string, addresses: readonly string[], now = Date.now()): Promise<Map<string, SshTarget>> {
    for (const [run, entry] of this.known) if (now - entry.at > JUMP_LOOKUP_TTL_MS) this.known.delete(run);
    const entry = this.known.get(runWorkflowId);
    if (entry && addresses.every((a) => entry.addresses.has(a))) return entry.hosts;
    const jobs = await this.jobsOf(runWorkflowId);
    const fresh = { at: now, addresses: addressesOf(jobs), hosts: jumpedHostsOf(jobs) };
    this.known.set(runWorkflowId, fresh);
    return fresh.hosts;
  }
}

/** The run's jumped hosts for an activity its RunWorkflow called (asked by the run's workflow id), looked up in its jobs. */
export function replicaJumpsOfRuns(): ReplicaJumps {
  return new ReplicaJumps((runWorkflowId) => runJobsOf(Context.current().client, runWorkflowId));
}

/**
 * By address, the hosts behind a jump among `urls` for the activity under way: none unless a
 * RunWorkflow called it (only a run has jobs to look up). Throws when the lookup fails, saying so: the
 * caller reports it for each URL rather than trying a direct request that cannot work.
 */
export async function jumpedHostsOfCaller(jumps: ReplicaJumps, urls: readonly string[]): Promise<Map<string, SshTarget>> {
  const { workflowType, workflowExecution } = Context.current().info;
  if (workflowType !== 'RunWorkflow' || !workflowExecution) return new Map();
  try {
    return await jumps.hostsFor(workflowExecution.workflowId, urls.map(addressOf));
  } catch (err) {
    throw new Error(`its host could not be looked up in the run's jobs: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

/** The address a replica's URL names, as the run's jobs have it (an IPv6 one without brackets). */
export function addressOf(url: string): string {
  return new URL(url).hostname.replace(/^\[(.*)\]$/, '$1');
}

/** A stream opened before `signal` fires; one that arrives after it is closed, not leaked. */
async function openBefore(opening: Promise<Duplex>, signal: AbortSignal): Promise<Duplex> {
  let onAbort = (): void => undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([opening, aborted]);
  } catch (err) {
    opening.then((stream) => stream.destroy(), () => undefined);
    throw err;
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}

/**
 * A dispatcher for one request to `url`, whose one connection is a channel the jump host of `host`
 * forwards to the replica, opened when undici asks for it (its `connect`, as the gateway's tunnels:
 * a socket opened beforehand stalls undici), within `timeoutMs` and before `signal` fires. Closed with
 * closeThroughJump once its answer is read.
 */
export function dispatcherThroughJump(url: string, host: SshTarget, timeoutMs: number, signal: AbortSignal): Client {
  const { origin, port } = new URL(url);
  const address = addressOf(url);
  const replicaPort = Number(port) || 80;
  let asked = false;
  return new Client(origin, {
    connect: (_opts, callback) => {
      // One request: no second connection.
      if (asked) return callback(new Error('the tunnel to this replica is closed'), null);
      asked = true;
      const tunnel = (): void =>
        void openBefore(forwardThroughJump(host, address, replicaPort, timeoutMs), signal).then(
          // Not a net.Socket, but what undici uses of one: a Duplex.
          (channel) => callback(null, channel as unknown as Socket),
          (err: Error) => callback(err, null),
        );
      // The host's own private address: straight first, unless it found no route lately.
      if (host.proxy_jump || noRouteLately(address)) return tunnel();
      connectStraight(address, replicaPort, Math.min(DIRECT_FIRST_TIMEOUT_MS, timeoutMs / 2)).then(
        (socket) => callback(null, socket),
        (err: Error & { code?: string }) => {
          if (!NO_ROUTE_CODES.has(err.code ?? '')) return callback(err, null);
          noRoute.set(address, Date.now());
          tunnel();
        },
      );
    },
  });
}

/** Addresses a straight connection found no route to, and when: gone through the host for a minute. */
const noRoute = new Map<string, number>();
const NO_ROUTE_KEPT_MS = 60_000;

function noRouteLately(address: string): boolean {
  const at = noRoute.get(address);
  if (at !== undefined && Date.now() - at < NO_ROUTE_KEPT_MS) return true;
  noRoute.delete(address);
  return false;
}

function connectStraight(host: string, port: number, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(Object.assign(new Error(`no answer from ${host}:${port} within ${timeoutMs} ms`), { code: 'ETIMEDOUT' }));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      resolve(socket);
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/**
 * Closes a dispatcher of dispatcherThroughJump and its channel, without waiting: undici's `destroy`
 * resolves only once the channel reports it closed, which the e2e saw never come after the answer was
 * read (a gate A with its 200 in hand, stuck for minutes), so the caller would outlive every bound.
 */
export function closeThroughJump(dispatcher: Client): void {
  dispatcher.destroy().catch(() => undefined);
}
