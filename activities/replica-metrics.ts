import { sumMetrics } from '../src/metrics/exposition-sums';
import type { ReadReplicaMetricsInput, ReadReplicaMetricsResult } from './types';

/**
 * A group's own traffic read where it is served (Troupe's `scaling.replica_metrics`): each replica's
 * Prometheus endpoint fetched once, the wanted metrics summed over their series. A replica is a
 * stranger: its answer is bounded in time and size, redirects are not followed, and what it said is
 * never echoed beyond the HTTP status.
 */

/** One endpoint's answer is waited for this long… */
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

async function readOne(url: string, names: readonly string[]): Promise<{ values: Record<string, number> | null; error: string | null }> {
  try {
    const res = await fetch(url, { redirect: 'manual', signal: AbortSignal.timeout(REPLICA_METRICS_TIMEOUT_MS), headers: { Accept: 'text/plain;version=0.0.4' } });
    if (res.status !== 200) {
      await res.body?.cancel();
      return { values: null, error: `HTTP ${res.status}` };
    }
    return { values: sumMetrics(await readBounded(res), names), error: null };
  } catch (err) {
    const why = err instanceof Error && err.cause instanceof Error ? err.cause.message : err instanceof Error ? err.message : String(err);
    return { values: null, error: why };
  }
}

export function createReplicaMetricsActivities() {
  return {
    async readReplicaMetrics({ targets }: ReadReplicaMetricsInput): Promise<ReadReplicaMetricsResult> {
      const replicas = await Promise.all(targets.map(async (t) => ({ group: t.group, url: t.url, ...(await readOne(t.url, t.names)) })));
      return { replicas };
    },
  };
}
