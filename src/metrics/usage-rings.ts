import { pointOf, type JobKey, type JobSeries, type JobUsage, type UsagePoint } from '../backends/job-usage';

/**
 * The worker's samples of the jobs it supervises: a ring of the last points per job, and a bound
 * on the number of jobs (the least lately sampled go first). Memory only: samples never enter
 * workflow history, and a worker that restarts starts its rings anew.
 */
export interface UsageRingLimits {
  pointsPerJob: number;
  jobs: number;
}

/** 120 points at the default 5 s interval: the last ten minutes of each job. */
export const DEFAULT_RING_LIMITS: UsageRingLimits = { pointsPerJob: 120, jobs: 4_096 };

interface Ring {
  job: JobKey;
  last: JobUsage | null;
  points: UsagePoint[];
  /** False once the job is no longer supervised here (its gauges go). */
  live: boolean;
}

const keyOf = (job: JobKey): string => JSON.stringify([job.run_name, job.job_num, job.attempt]);

export class UsageRings {
  private readonly rings = new Map<string, Ring>();

  constructor(private readonly limits: UsageRingLimits = DEFAULT_RING_LIMITS) {}

  /** Adds a reading of the job; returns its point. */
  record(job: JobKey, usage: JobUsage): UsagePoint {
    const key = keyOf(job);
    const ring = this.rings.get(key) ?? { job, last: null, points: [], live: true };
    // Re-inserted: the map's order is the order of last sampling, oldest first.
    this.rings.delete(key);
    this.rings.set(key, ring);
    const point = pointOf(ring.last, usage);
    ring.last = usage;
    ring.live = true;
    ring.points.push(point);
    if (ring.points.length > this.limits.pointsPerJob) ring.points.splice(0, ring.points.length - this.limits.pointsPerJob);
    while (this.rings.size > this.limits.jobs) {
      const oldest = this.rings.keys().next().value;
      if (oldest === undefined) break;
      this.rings.delete(oldest);
    }
    return point;
  }

  /** The job is no longer supervised here: its series stays readable, its gauges go. */
  ended(job: JobKey): void {
    const ring = this.rings.get(keyOf(job));
    if (ring) ring.live = false;
  }

  /** The run's series, in rank order (group, then rank, then attempt). */
  series(runName: string, group?: string): JobSeries[] {
    return [...this.rings.values()]
      .filter((r) => r.job.run_name === runName && (group === undefined || r.job.group === group))
      .sort((a, b) => a.job.job_num - b.job.job_num || a.job.attempt - b.job.attempt)
      .map((r) => ({ job: r.job, points: [...r.points] }));
  }

  /** The latest point of every job still supervised here (what the gauges show). */
  latest(): Array<{ job: JobKey; point: UsagePoint }> {
    return [...this.rings.values()].filter((r) => r.live && r.points.length > 0).map((r) => ({ job: r.job, point: r.points[r.points.length - 1] as UsagePoint }));
  }
}
