import { z } from 'zod';

/**
 * What a job uses on its node, as a backend reads it at one moment: CPU time so far (a counter),
 * memory now, and each GPU of the node. Rates (CPU %) come from two readings (pointOf).
 */
export const GpuUsageSchema = z.object({
  index: z.number().int().nonnegative(),
  name: z.string(),
  /** 0..100, as the vendor tool says. */
  util_percent: z.number().min(0).max(100),
  memory_used_bytes: z.number().nonnegative(),
  memory_total_bytes: z.number().nonnegative(),
});
export type GpuUsage = z.infer<typeof GpuUsageSchema>;

export const JobUsageSchema = z.object({
  /** Epoch ms of the reading. */
  at_ms: z.number(),
  /** CPU seconds (user + system) the job's processes have used so far. */
  cpu_seconds: z.number().nonnegative(),
  memory_bytes: z.number().nonnegative(),
  /** The job's memory limit (its cgroup's memory.max), else the node's memory; null when unknown. */
  memory_limit_bytes: z.number().positive().nullable(),
  /** Where the figures come from: the job's own cgroup, or its processes in /proc. */
  source: z.enum(['cgroup', 'proc']),
  gpus: z.array(GpuUsageSchema),
});
export type JobUsage = z.infer<typeof JobUsageSchema>;

/** One point of a job's series: a reading with its CPU rate since the one before. */
export const UsagePointSchema = JobUsageSchema.omit({ cpu_seconds: true }).extend({
  /** 100 = one core busy; null for the first reading (no interval yet). */
  cpu_percent: z.number().nonnegative().nullable(),
});
export type UsagePoint = z.infer<typeof UsagePointSchema>;

/** A reading as a point: CPU % over the interval since `before` (same job, earlier reading). */
export function pointOf(before: JobUsage | null, now: JobUsage): UsagePoint {
  const { cpu_seconds, ...rest } = now;
  const interval_s = before ? (now.at_ms - before.at_ms) / 1000 : 0;
  // A counter that went back is another process tree (a restarted wrapper): no rate from it.
  const used = before ? cpu_seconds - before.cpu_seconds : -1;
  const cpu_percent = interval_s > 0 && used >= 0 ? Math.round((used / interval_s) * 1000) / 10 : null;
  return { ...rest, cpu_percent };
}

/** Which job a series is about: what the CLI and the gauges label it with. */
export const JobKeySchema = z.object({
  run_name: z.string(),
  group: z.string(),
  /** Rank within the group (node_group_job_index). */
  rank: z.number().int().nonnegative(),
  job_num: z.number().int().nonnegative(),
  attempt: z.number().int().nonnegative(),
  host: z.string(),
});
export type JobKey = z.infer<typeof JobKeySchema>;

export const JobSeriesSchema = z.object({ job: JobKeySchema, points: z.array(UsagePointSchema) });
export type JobSeries = z.infer<typeof JobSeriesSchema>;

/** What a worker answers for one run: a series per job it samples (or sampled lately). */
export const RunUsageSchema = z.object({ run_name: z.string(), worker: z.string(), jobs: z.array(JobSeriesSchema) });
export type RunUsage = z.infer<typeof RunUsageSchema>;
