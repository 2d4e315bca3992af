import type { Backend, Instance, JobFiles, JobRef, PeersFile, ProvisionRequest, Room, RoomRequest } from '../../src/backends/backend';
import { NoCapacityError } from '../../src/backends/backend';

export interface ProvisionCall {
  job_nums: number[];
  started: number;
  ended: number;
  ok: boolean;
}

export interface RecordingOptions {
  groupProvisioning?: boolean;
  /** Extra time each provision() call takes, so that overlaps would show. */
  provisionDelayMs?: number;
  /** job_num → how many of its first provision attempts say "no capacity". */
  noCapacityAttempts?: Record<number, number>;
  /** Jobs whose provisioning never answers (to reach the address deadline). */
  provisionHangs?: number[];
  /** The runner never says it is ready (to reach WAITING_RUNNER_LIMIT_EXCEEDED). */
  runnerNeverReady?: boolean;
}

/**
 * Wraps a real backend and records every provision() call with its time span, to check the
 * staged unlock's order; it can also inject "no capacity" for given jobs (fault injection).
 */
export class RecordingBackend implements Backend {
  readonly kind: string;
  readonly groupProvisioning: boolean;
  readonly calls: ProvisionCall[] = [];
  readonly starts: { job_num: number; at: number }[] = [];
  private readonly attempts = new Map<number, number>();

  constructor(
    private readonly inner: Backend,
    private readonly opts: RecordingOptions = {},
  ) {
    this.kind = `recording(${inner.kind})`;
    this.groupProvisioning = opts.groupProvisioning ?? inner.groupProvisioning;
  }

  async provision(req: ProvisionRequest): Promise<Instance[]> {
    const call: ProvisionCall = { job_nums: req.jobs.map((j) => j.job_num), started: Date.now(), ended: 0, ok: false };
    this.calls.push(call);
    try {
      if (req.jobs.some((job) => this.opts.provisionHangs?.includes(job.job_num))) await new Promise(() => undefined);
      if (this.opts.provisionDelayMs) await new Promise((r) => setTimeout(r, this.opts.provisionDelayMs));
      for (const job of req.jobs) {
        const seen = (this.attempts.get(job.job_num) ?? 0) + 1;
        this.attempts.set(job.job_num, seen);
        if (seen <= (this.opts.noCapacityAttempts?.[job.job_num] ?? 0)) {
          throw new NoCapacityError(`injected: no capacity for job ${job.job_num} (attempt ${seen})`);
        }
      }
      const instances = await this.inner.provision(req);
      call.ok = true;
      return instances;
    } finally {
      call.ended = Date.now();
    }
  }

  room(req: RoomRequest): Promise<Room> {
    return this.inner.room(req);
  }

  jobDirectory(job: JobRef): string {
    return this.inner.jobDirectory(job);
  }
  async runnerReady(job: JobRef) {
    return this.opts.runnerNeverReady ? false : await this.inner.runnerReady(job);
  }
  async startJob(job: JobRef, files: JobFiles) {
    this.starts.push({ job_num: job.job_num, at: Date.now() });
    return await this.inner.startJob(job, files);
  }
  jobState(job: JobRef) {
    return this.inner.jobState(job);
  }
  stopJob(job: JobRef, graceSeconds: number) {
    return this.inner.stopJob(job, graceSeconds);
  }
  releaseRun(runId: string, submission: number) {
    return this.inner.releaseRun(runId, submission);
  }
  releaseJob(job: JobRef, graceSeconds: number) {
    return this.inner.releaseJob(job, graceSeconds);
  }
  writePeers(job: JobRef, peers: PeersFile) {
    return this.inner.writePeers(job, peers);
  }
  exec(job: JobRef, script: string, timeoutMs: number) {
    return this.inner.exec(job, script, timeoutMs);
  }
  readLog(job: JobRef, offset: number, limitBytes: number) {
    return this.inner.readLog(job, offset, limitBytes);
  }
}
