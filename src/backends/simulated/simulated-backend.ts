import {
  NoCapacityError,
  SubmissionClosedError,
  type Backend,
  type ExecResult,
  type Instance,
  type JobFiles,
  type JobProcessState,
  type JobRef,
  type LogChunk,
  type PeersFile,
  type ProvisionRequest,
  type Room,
  type RoomRequest,
} from '../backend';
import { attemptDirectoryName } from '../../runner/job-layout';

export interface SimulatedBackendOptions {
  /** How long a simulated job "runs" before it exits 0. */
  jobDurationMs?: number;
  /** Delay of each provision() call (a cloud API round trip). */
  provisionDelayMs?: number;
  /** Maximum instances held at once; unlimited when absent. */
  capacity?: number;
  groupProvisioning?: boolean;
}

/**
 * SIMULATED: provisions nothing and runs nothing. Instances are entries in this process's memory
 * with made-up addresses in 198.18.0.0/15 (the benchmarking range, never routed); a "job" is a
 * start time. It exists to measure the control plane alone (bench/) and is never a default.
 */
export class SimulatedBackend implements Backend {
  readonly kind = 'simulated';
  readonly groupProvisioning: boolean;
  private readonly instances = new Map<string, Instance>();
  private readonly closed = new Set<string>();
  private readonly started = new Map<string, number>();
  private readonly stopped = new Set<string>();
  /** The latest peers version written per instance (what a node's peers.json would hold). */
  private readonly peers = new Map<string, number>();
  private nextAddress = 0;

  constructor(private readonly opts: SimulatedBackendOptions = {}) {
    this.groupProvisioning = opts.groupProvisioning ?? true;
  }

  async provision(req: ProvisionRequest): Promise<Instance[]> {
    const submissionKey = `${req.run_id}/${req.submission}`;
    if (this.closed.has(submissionKey)) throw new SubmissionClosedError(`submission ${submissionKey} was released`);
    if (this.opts.provisionDelayMs) await new Promise((r) => setTimeout(r, this.opts.provisionDelayMs));
    const missing = req.jobs.filter((job) => !this.instances.has(instanceKey(submissionKey, job.job_num, job.attempt)));
    if (this.opts.capacity !== undefined && this.instances.size + missing.length > this.opts.capacity) {
      throw new NoCapacityError(`simulated fleet is full (${this.opts.capacity} instances)`);
    }
    return req.jobs.map((job) => {
      const key = instanceKey(submissionKey, job.job_num, job.attempt);
      let instance = this.instances.get(key);
      if (!instance) {
        const n = this.nextAddress++;
        instance = {
          instance_id: key,
          host: 'simulated',
          internal_ip: `198.18.${Math.floor(n / 250) % 256}.${(n % 250) + 1}`,
          gpus: req.group.resources.gpu.count.min ?? 0,
          details: {},
        };
        this.instances.set(key, instance);
      }
      return instance;
    });
  }

  async room({ count }: RoomRequest): Promise<Room> {
    const fleet = 'the simulated fleet';
    const free = this.opts.capacity === undefined ? count : Math.max(0, this.opts.capacity - this.instances.size);
    if (free >= count) return { fleet, fits: count, reason: null };
    return { fleet, fits: free, reason: `it holds ${this.opts.capacity} instances at most, ${this.instances.size} taken` };
  }

  jobDirectory(job: JobRef): string {
    return `/simulated/${job.run_id}/${job.submission}/${attemptDirectoryName(job.job_name, job.attempt)}`;
  }

  async runnerReady(): Promise<boolean> {
    return true;
  }

  async startJob(job: JobRef, files: JobFiles): Promise<{ pid: number }> {
    const key = job.instance.instance_id;
    if (!this.stopped.has(key) && !this.started.has(key)) this.started.set(key, Date.now());
    if (files.peers) await this.writePeers(job, files.peers);
    return { pid: 1 };
  }

  async jobState(job: JobRef): Promise<JobProcessState> {
    const startedAt = this.started.get(job.instance.instance_id);
    if (startedAt === undefined) return { state: 'absent' };
    if (this.stopped.has(job.instance.instance_id)) return { state: 'exited', pid: 1, exit_code: 143 };
    return Date.now() - startedAt >= (this.opts.jobDurationMs ?? 0)
      ? { state: 'exited', pid: 1, exit_code: 0 }
      : { state: 'running', pid: 1 };
  }

  async stopJob(job: JobRef): Promise<void> {
    this.stopped.add(job.instance.instance_id);
  }

  async releaseRun(runId: string, submission: number): Promise<void> {
    const prefix = `${runId}/${submission}/`;
    this.closed.add(`${runId}/${submission}`);
    for (const key of [...this.instances.keys()]) if (key.startsWith(prefix)) this.instances.delete(key);
  }

  /** The attempt's instance goes back to the pool; its "job" reads as stopped. */
  async releaseJob(job: JobRef): Promise<void> {
    this.stopped.add(job.instance.instance_id);
    this.instances.delete(job.instance.instance_id);
  }

  async writePeers(job: JobRef, peers: PeersFile): Promise<void> {
    const key = job.instance.instance_id;
    if (!this.instances.has(key)) return;
    if ((this.peers.get(key) ?? -1) <= peers.version) this.peers.set(key, peers.version);
  }

  /** The version of the book the instance's peers.json would hold (null: none written). */
  peersVersion(job: JobRef): number | null {
    return this.peers.get(job.instance.instance_id) ?? null;
  }

  /** Every simulated node is ready (and answers every probe) once its job has started. */
  async exec(job: JobRef): Promise<ExecResult> {
    return this.started.has(job.instance.instance_id) ? { exit_code: 0, output: '' } : { exit_code: 1, output: 'not started' };
  }

  async readLog(): Promise<LogChunk> {
    return { data: '', next_offset: 0 };
  }
}

/** Attempt 0 keeps the key (and instance id) it had before attempts existed. */
function instanceKey(submissionKey: string, jobNum: number, attempt: number | undefined): string {
  return attempt ? `${submissionKey}/${jobNum}.attempt-${attempt}` : `${submissionKey}/${jobNum}`;
}
