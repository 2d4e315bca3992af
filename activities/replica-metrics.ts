import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { Context } from '@temporalio/activity';
import { Client, fetch, type Response } from 'undici';
import { forwardThroughJump } from '../src/backends/ssh/jump-forward';
import type { SshTarget } from '../src/backends/ssh/target';
import { sumMetrics } from '../src/metrics/exposition-sums';
import { ReplicaJumps, runJobsOf } from './replica-jumps';
import type { ReadReplicaMetricsInput, ReadReplicaMetricsResult } from './types';

/**
 * A group's own traffic read where it is served (Troupe's `scaling.replica_metrics`): each replica's
 * Prometheus endpoint fetched once, the wanted metrics summed over their series. A replica is a
 * stranger: its answer is bounded in time and size, redirects are not followed, and what it said is
 * never echoed beyond the HTTP status. A replica on an SSH host behind its fleet's proxy_jump (a
 * private network the worker has no route to) is read through the jump host, over the SSH backend's
 * connection to it (replica-jumps.ts says how the activity learns which ones are).
 */

/** One endpoint's answer is waited for this long (the tunnel's opening included)… */
export const REPLICA_METRICS_TIMEOUT_MS = 2000;
/** …and read up to this many bytes (a vLLM replica's exposition is ~100 KiB). */
export const REPLICA_METRICS_MAX_BYTES = 4 * 1024 * 1024;

async function readBounded(res: Response): Promise<string> {
  const reader = res.body?.getReader();
  if (!reader) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > REPLICA_METRICS_MAX_BYTES) {
      await reader.cancel();
      throw new Error(`its metrics are larger than ${REPLICA_METRICS_MAX_BYTES / 1024 / 1024} MiB`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The address a replica's URL names, as the run's jobs have it (an IPv6 one without brackets). */
function addressOf(url: string): string {
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
 * A dispatcher whose one connection is a channel the jump host of `host` forwards to the replica, opened
 * when undici asks for it (its `connect`, as the gateway's tunnels), before `signal` fires.
 */
function throughJump(url: string, host: SshTarget, signal: AbortSignal): Client {
  const { origin, port } = new URL(url);
  let asked = false;
  return new Client(origin, {
    connect: (_opts, callback) => {
      // A reading is one request: no second connection.
      if (asked) return callback(new Error('the tunnel to this replica is closed'), null);
      asked = true;
      openBefore(forwardThroughJump(host, addressOf(url), Number(port) || 80, REPLICA_METRICS_TIMEOUT_MS), signal).then(
        // Not a net.Socket, but what undici uses of one: a Duplex.
        (channel) => callback(null, channel as unknown as Socket),
        (err: Error) => callback(err, null),
      );
    },
  });
}

async function readOne(url: string, names: readonly string[], jumped: SshTarget | null): Promise<{ values: Record<string, number> | null; error: string | null }> {
  const signal = AbortSignal.timeout(REPLICA_METRICS_TIMEOUT_MS);
  const dispatcher = jumped ? throughJump(url, jumped, signal) : undefined;
  try {
    const res = await fetch(url, { redirect: 'manual', signal, headers: { Accept: 'text/plain;version=0.0.4' }, ...(dispatcher ? { dispatcher } : {}) });
    if (res.status !== 200) {
      await res.body?.cancel();
      return { values: null, error: `HTTP ${res.status}` };
    }
    return { values: sumMetrics(await readBounded(res), names), error: null };
  } catch (err) {
    const why = err instanceof Error && err.cause instanceof Error ? err.cause.message : err instanceof Error ? err.message : String(err);
    return { values: null, error: why };
  } finally {
    // Closes the channel with it.
    await dispatcher?.destroy().catch(() => undefined);
  }
}

/** Each target read, at once: those whose address is in `jumped` through that host's jump host, the others directly. */
export async function readReplicas(targets: ReadReplicaMetricsInput['targets'], jumped: ReadonlyMap<string, SshTarget>): Promise<ReadReplicaMetricsResult> {
  const replicas = await Promise.all(targets.map(async (t) => ({ group: t.group, url: t.url, ...(await readOne(t.url, t.names, jumped.get(addressOf(t.url)) ?? null)) })));
  return { replicas };
}

export function createReplicaMetricsActivities() {
  const jumps = new ReplicaJumps((runWorkflowId) => runJobsOf(Context.current().client, runWorkflowId));
  return {
    async readReplicaMetrics({ targets }: ReadReplicaMetricsInput): Promise<ReadReplicaMetricsResult> {
      const { workflowType, workflowExecution } = Context.current().info;
      let hosts = new Map<string, SshTarget>();
      // Only a run has jobs to look up (the RunWorkflow asks); a lookup that fails is every replica's error, not a direct read that cannot work.
      if (workflowType === 'RunWorkflow' && workflowExecution) {
        try {
          hosts = await jumps.hostsFor(workflowExecution.workflowId, targets.map((t) => addressOf(t.url)));
        } catch (err) {
          const error = `its host could not be looked up in the run's jobs: ${err instanceof Error ? err.message : String(err)}`;
          return { replicas: targets.map((t) => ({ group: t.group, url: t.url, values: null, error })) };
        }
      }
      return await readReplicas(targets, hosts);
    },
  };
}
