import { fetch, type Response } from 'undici';
import type { SshTarget } from '../src/backends/ssh/target';
import { whyNoAnswer } from '../src/gateway/replica-probes';
import { sumMetrics } from '../src/metrics/exposition-sums';
import { addressOf, closeThroughJump, dispatcherThroughJump, jumpedHostsOfCaller, replicaJumpsOfRuns } from './replica-jumps';
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

async function readOne(url: string, names: readonly string[], jumped: SshTarget | null): Promise<{ values: Record<string, number> | null; error: string | null }> {
  const signal = AbortSignal.timeout(REPLICA_METRICS_TIMEOUT_MS);
  const dispatcher = jumped ? dispatcherThroughJump(url, jumped, REPLICA_METRICS_TIMEOUT_MS, signal) : undefined;
  try {
    const res = await fetch(url, { redirect: 'manual', signal, headers: { Accept: 'text/plain;version=0.0.4' }, ...(dispatcher ? { dispatcher } : {}) });
    if (res.status !== 200) {
      await res.body?.cancel();
      return { values: null, error: `HTTP ${res.status}` };
    }
    return { values: sumMetrics(await readBounded(res), names), error: null };
  } catch (err) {
    return { values: null, error: whyNoAnswer(err) };
  } finally {
    if (dispatcher) closeThroughJump(dispatcher);
  }
}

/** Each target read, at once: those whose address is in `jumped` through that host's jump host, the others directly. */
export async function readReplicas(targets: ReadReplicaMetricsInput['targets'], jumped: ReadonlyMap<string, SshTarget>): Promise<ReadReplicaMetricsResult> {
  const replicas = await Promise.all(targets.map(async (t) => ({ group: t.group, url: t.url, ...(await readOne(t.url, t.names, jumped.get(addressOf(t.url)) ?? null)) })));
  return { replicas };
}

export function createReplicaMetricsActivities() {
  const jumps = replicaJumpsOfRuns();
  return {
    async readReplicaMetrics({ targets }: ReadReplicaMetricsInput): Promise<ReadReplicaMetricsResult> {
      let hosts: Map<string, SshTarget>;
      // A lookup that fails is every replica's error, not a direct read that cannot work.
      try {
        hosts = await jumpedHostsOfCaller(jumps, targets.map((t) => t.url));
      } catch (err) {
        const error = err instanceof Error ? err.message : String(err);
        return { replicas: targets.map((t) => ({ group: t.group, url: t.url, values: null, error })) };
      }
      return await readReplicas(targets, hosts);
    },
  };
}
