import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { sshSessionStats } from '../backends/ssh/session';
import { UsageRings } from './usage-rings';

/**
 * Troupe's own metrics of one worker process, in Prometheus's model (prom-client): what the
 * worker does (jobs it supervises, provisioning failures, SSH connections) and what its runs
 * tell it through the workflow sink (status changes, launch latency, restarts, resizes). Names
 * follow Prometheus's conventions: `troupe_` prefix, `_total` for counters, base units.
 * The per-job gauges carry run, group and rank: at most `maxJobSeries` jobs are exported, the
 * ones this worker supervises now.
 */

/** Submit → every job RUNNING, in seconds: from a one-node local run to a large SSH fleet. */
const LAUNCH_BUCKETS = [0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];

export type RunStatusCounter = () => Promise<Record<string, number>>;

export interface TroupeMetricsOptions {
  /** At most this many jobs get per-job gauges (cardinality bound; default 1000). */
  maxJobSeries?: number;
}

export class TroupeMetrics {
  readonly registry = new Registry();
  /** Samples of the jobs this worker supervises (troupe metrics RUN reads them). */
  readonly usage = new UsageRings();
  /**
   * True while an endpoint serves these metrics (troupe worker --metrics). Jobs' usage is sampled
   * only then: a reading is a command on the node (an SSH fleet's hosts otherwise see none while
   * their jobs run), so nothing is read that no one can ask for.
   */
  served = false;
  readonly runStatusChanges: Counter<'status'>;
  readonly launchSeconds: Histogram<'backend'>;
  readonly jobsSupervised: Gauge<'backend' | 'state'>;
  readonly jobEvents: Counter<'backend' | 'event'>;
  readonly nodeRestarts: Counter<'group'>;
  readonly resizes: Counter<'group' | 'direction'>;
  readonly provisioningFailures: Counter<'backend' | 'reason'>;
  readonly usageSamples: Counter<'backend' | 'outcome'>;
  private runCounter: RunStatusCounter | null = null;

  constructor(options: TroupeMetricsOptions = {}) {
    const registers = [this.registry];
    const maxJobs = options.maxJobSeries ?? 1_000;
    this.runStatusChanges = new Counter({ name: 'troupe_run_status_changes_total', help: 'Runs that entered each status, as seen by this worker', labelNames: ['status'], registers });
    this.launchSeconds = new Histogram({
      name: 'troupe_launch_duration_seconds',
      help: "A run's launch: from its submission until every job is RUNNING",
      labelNames: ['backend'],
      buckets: LAUNCH_BUCKETS,
      registers,
    });
    this.jobsSupervised = new Gauge({ name: 'troupe_jobs', help: 'Jobs this worker supervises now, by backend and state', labelNames: ['backend', 'state'], registers });
    this.jobEvents = new Counter({ name: 'troupe_job_events_total', help: 'What became of the jobs this worker started: started, exited (ok or error), failed', labelNames: ['backend', 'event'], registers });
    this.nodeRestarts = new Counter({ name: 'troupe_node_restarts_total', help: 'Nodes given a new attempt by a restart, per group', labelNames: ['group'], registers });
    this.resizes = new Counter({ name: 'troupe_group_resizes_total', help: 'Resizes of a group, up or down', labelNames: ['group', 'direction'], registers });
    this.provisioningFailures = new Counter({ name: 'troupe_provisioning_failures_total', help: 'Provisioning calls that failed, by reason', labelNames: ['backend', 'reason'], registers });
    this.usageSamples = new Counter({ name: 'troupe_usage_samples_total', help: "Readings of jobs' usage on their nodes, by outcome", labelNames: ['backend', 'outcome'], registers });

    const metrics = this;
    new Gauge({
      name: 'troupe_runs',
      help: 'Runs by status, from Temporal visibility (absent when the worker has no client or the search attribute is not registered)',
      labelNames: ['status'],
      registers,
      async collect() {
        this.reset();
        if (!metrics.runCounter) return;
        try {
          for (const [status, n] of Object.entries(await metrics.runCounter())) this.set({ status }, n);
        } catch {
          // Visibility unavailable for a moment: no figure rather than a wrong one.
        }
      },
    });
    new Gauge({
      name: 'troupe_ssh_hosts_connected',
      help: 'Distinct SSH hosts this worker has an open connection to',
      registers,
      collect() {
        this.set(sshSessionStats().hosts);
      },
    });
    new Gauge({
      name: 'troupe_ssh_connections',
      help: 'SSH connections this worker has open',
      registers,
      collect() {
        this.set(sshSessionStats().connections);
      },
    });
    new Counter({
      name: 'troupe_ssh_connections_lost_total',
      help: 'SSH connections that ended without Troupe closing them (host gone, keepalive failed)',
      registers,
      collect() {
        this.reset();
        this.inc(sshSessionStats().lost);
      },
    });
    new Gauge({
      name: 'troupe_ssh_control_shells',
      help: 'Control shells open on SSH hosts (each runs commands one at a time)',
      registers,
      collect() {
        this.set(sshSessionStats().controlShells);
      },
    });

    const perJob = (name: string, help: string, labels: string[], set: (g: Gauge<string>, latest: ReturnType<UsageRings['latest']>) => void) =>
      new Gauge({
        name,
        help,
        labelNames: labels,
        registers,
        collect() {
          this.reset();
          set(this, metrics.usage.latest().slice(0, maxJobs));
        },
      });
    const jobLabels = ['run', 'group', 'rank'];
    const labelsOf = (job: { run_name: string; group: string; rank: number }) => ({ run: job.run_name, group: job.group, rank: String(job.rank) });
    perJob('troupe_job_cpu_cores', 'CPU a job uses, in cores (1 = one core busy), over the last interval', jobLabels, (g, latest) => {
      for (const { job, point } of latest) if (point.cpu_percent !== null) g.set(labelsOf(job), point.cpu_percent / 100);
    });
    perJob('troupe_job_memory_bytes', 'Memory a job uses', jobLabels, (g, latest) => {
      for (const { job, point } of latest) g.set(labelsOf(job), point.memory_bytes);
    });
    perJob('troupe_job_memory_limit_bytes', "A job's memory limit (its cgroup's, else its node's memory)", jobLabels, (g, latest) => {
      for (const { job, point } of latest) if (point.memory_limit_bytes !== null) g.set(labelsOf(job), point.memory_limit_bytes);
    });
    const gpuLabels = [...jobLabels, 'gpu'];
    perJob('troupe_job_gpu_utilization_ratio', "GPU utilisation on a job's node (0..1)", gpuLabels, (g, latest) => {
      for (const { job, point } of latest) for (const gpu of point.gpus) g.set({ ...labelsOf(job), gpu: String(gpu.index) }, gpu.util_percent / 100);
    });
    perJob('troupe_job_gpu_memory_used_bytes', "GPU memory used on a job's node", gpuLabels, (g, latest) => {
      for (const { job, point } of latest) for (const gpu of point.gpus) g.set({ ...labelsOf(job), gpu: String(gpu.index) }, gpu.memory_used_bytes);
    });
    perJob('troupe_job_gpu_memory_total_bytes', "GPU memory on a job's node", gpuLabels, (g, latest) => {
      for (const { job, point } of latest) for (const gpu of point.gpus) g.set({ ...labelsOf(job), gpu: String(gpu.index) }, gpu.memory_total_bytes);
    });
  }

  /** How `troupe_runs` counts runs by status (the worker's Temporal client, through visibility). */
  countRunsWith(counter: RunStatusCounter | null): void {
    this.runCounter = counter;
  }
}

/** The metrics of this process: activities and the workflow sink record here, the endpoint serves it. */
export const workerMetrics = new TroupeMetrics();
