import type { Backend, JobRef } from '../src/backends/backend';
import { mapLimit } from '../src/concurrency/map-limit';
import type { JobKey } from '../src/backends/job-usage';
import type { TroupeMetrics } from '../src/metrics/troupe-metrics';

/**
 * Reads the usage of a batch's running jobs on their nodes every interval, into the worker's rings
 * and gauges (never into workflow history). Runs beside the batch's supervision, on its own timer,
 * so a slow node never delays the exits the run waits for.
 */

/** TROUPE_USAGE_INTERVAL_S: seconds between readings of one job while the worker serves metrics (default 5; 0 turns sampling off). */
export function usageIntervalMs(): number {
  const text = process.env.TROUPE_USAGE_INTERVAL_S ?? '5';
  const s = Number(text);
  if (!Number.isFinite(s) || s < 0) throw new Error(`TROUPE_USAGE_INTERVAL_S must be a number of seconds ≥ 0, not ${JSON.stringify(text)}`);
  return s * 1000;
}

const CONCURRENCY = 16;

export interface SampledJob {
  ref: JobRef;
  key: JobKey;
}

/** Starts sampling; the returned function stops it. `live()` names the jobs still running. */
export function sampleUsage(target: Backend, backend: string, metrics: TroupeMetrics, live: () => SampledJob[], intervalMs = usageIntervalMs()): () => void {
  const usage = target.usage;
  // Read only what an endpoint serves (metrics.served): each reading is a command on the node.
  if (!usage || intervalMs <= 0 || !metrics.served) return () => undefined;
  const seen = new Map<string, JobKey>();
  let stopped = false;
  let busy = false;
  const pass = async () => {
    if (busy || stopped) return;
    busy = true;
    try {
      const jobs = live();
      const now = new Set(jobs.map((j) => j.ref.instance.instance_id));
      for (const [id, key] of seen) {
        if (!now.has(id)) {
          metrics.usage.ended(key);
          seen.delete(id);
        }
      }
      await mapLimit(jobs, CONCURRENCY, async ({ ref, key }) => {
        seen.set(ref.instance.instance_id, key);
        try {
          const reading = await usage.call(target, ref);
          if (stopped) return;
          if (reading) metrics.usage.record(key, reading);
          metrics.usageSamples.inc({ backend, outcome: reading ? 'ok' : 'not_running' });
        } catch {
          // A node that does not answer now is the supervision's business; the series just has a gap.
          metrics.usageSamples.inc({ backend, outcome: 'error' });
        }
      });
    } finally {
      busy = false;
    }
  };
  void pass();
  const timer = setInterval(() => void pass(), intervalMs);
  return () => {
    stopped = true;
    clearInterval(timer);
    for (const key of seen.values()) metrics.usage.ended(key);
  };
}
