import { RunUsageSchema, type JobSeries } from '../backends/job-usage';

/**
 * A run's job usage, read from the workers that sample it (`troupe worker --metrics`): each
 * worker holds the samples of the batches it supervises, in memory, never in workflow history,
 * so the client asks the workers' endpoints directly and merges what they hold.
 */

/** Where a worker's endpoint is when nothing else says (`troupe worker --metrics 127.0.0.1:9464`). */
export const DEFAULT_WORKER_METRICS_URL = 'http://127.0.0.1:9464';

/** TROUPE_METRICS_URL: the workers' endpoints, comma-separated (default DEFAULT_WORKER_METRICS_URL). */
export function workerMetricsUrls(env: Record<string, string | undefined> = process.env): string[] {
  const text = env.TROUPE_METRICS_URL?.trim();
  return text ? text.split(',').map((u) => u.trim()).filter((u) => u !== '') : [DEFAULT_WORKER_METRICS_URL];
}

export interface RunMetricsOptions {
  /** The workers' endpoints (default: workerMetricsUrls()). */
  workers?: string[];
  /** Only this group's jobs. */
  group?: string;
  /** Per worker (default 5 s). */
  timeoutMs?: number;
}

export interface RunMetrics {
  run_name: string;
  /** A series per job attempt, in rank order; the freshest when two workers hold one. */
  jobs: JobSeries[];
  /** Endpoints that did not answer, with why. */
  unreachable: Array<{ url: string; error: string }>;
}

const lastAt = (s: JobSeries): number => s.points[s.points.length - 1]?.at_ms ?? 0;

/** Merges the workers' answers: one series per (job, attempt), the one sampled last. */
export function mergeSeries(answers: JobSeries[][]): JobSeries[] {
  const byJob = new Map<string, JobSeries>();
  for (const series of answers.flat()) {
    const key = `${series.job.job_num}#${series.job.attempt}`;
    const known = byJob.get(key);
    if (!known || lastAt(series) > lastAt(known)) byJob.set(key, series);
  }
  return [...byJob.values()].sort((a, b) => a.job.job_num - b.job.job_num || a.job.attempt - b.job.attempt);
}

export async function fetchRunMetrics(runName: string, options: RunMetricsOptions = {}): Promise<RunMetrics> {
  const workers = options.workers ?? workerMetricsUrls();
  const unreachable: RunMetrics['unreachable'] = [];
  const answers = await Promise.all(
    workers.map(async (base) => {
      const url = new URL(`v1/runs/${encodeURIComponent(runName)}/usage`, base.endsWith('/') ? base : `${base}/`);
      if (options.group !== undefined) url.searchParams.set('group', options.group);
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(options.timeoutMs ?? 5_000) });
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        return RunUsageSchema.parse(await res.json()).jobs;
      } catch (err) {
        unreachable.push({ url: base, error: err instanceof Error ? err.message : String(err) });
        return [];
      }
    }),
  );
  return { run_name: runName, jobs: mergeSeries(answers), unreachable };
}
