import { mkdirSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { attemptDirectoryName } from '../../src/runner/job-layout';
import {
  SubmissionClosedError,
  type Backend,
  type Instance,
  type JobFiles,
  type JobProcessState,
  type JobRef,
  type LogChunk,
  type ProvisionRequest,
  type Room,
  type RoomRequest,
} from '../../src/backends/backend';

/**
 * SIMULATED, like src/backends/simulated, but its little state (start times, stops, released
 * submissions) lives in files of a shared folder (tmpfs), so several worker processes polling one
 * task queue see the same "jobs" — an activity of a run may land on any of them. Provisions nothing.
 */
export class SharedSimulatedBackend implements Backend {
  readonly kind = 'simulated';
  readonly groupProvisioning = true;

  constructor(private readonly dir: string, private readonly jobDurationMs: number) {
    for (const sub of ['started', 'stopped', 'closed']) mkdirSync(join(dir, sub), { recursive: true });
  }

  private file(kind: 'started' | 'stopped' | 'closed', key: string): string {
    return join(this.dir, kind, key.replace(/[^A-Za-z0-9_.-]/g, '_'));
  }

  async provision(req: ProvisionRequest): Promise<Instance[]> {
    if (await exists(this.file('closed', `${req.run_id}/${req.submission}`))) {
      throw new SubmissionClosedError(`submission ${req.submission} of ${req.run_id} was released`);
    }
    return req.jobs.map((job) => ({
      instance_id: `${req.run_id}/${req.submission}/${job.attempt ? `${job.job_num}.attempt-${job.attempt}` : job.job_num}`,
      host: 'simulated',
      internal_ip: `198.18.${Math.floor(job.job_num / 250) % 256}.${(job.job_num % 250) + 1}`,
      gpus: req.group.resources.gpu.count.min ?? 0,
      details: {},
    }));
  }

  /** Unbounded, like its provision(). */
  async room({ count }: RoomRequest): Promise<Room> {
    return { fleet: 'the simulated fleet', fits: count, reason: null };
  }

  jobDirectory(job: JobRef): string {
    return `/simulated/${job.run_id}/${job.submission}/${attemptDirectoryName(job.job_name, job.attempt)}`;
  }

  async runnerReady(): Promise<boolean> {
    return true;
  }

  async startJob(job: JobRef, _files: JobFiles): Promise<{ pid: number }> {
    if (await exists(this.file('stopped', job.instance.instance_id))) {
      throw new SubmissionClosedError(`${job.job_name} was stopped before it started`);
    }
    try {
      await writeFile(this.file('started', job.instance.instance_id), `${Date.now()}\n`, { flag: 'wx' });
    } catch (err) {
      if (!(err instanceof Error && 'code' in err && err.code === 'EEXIST')) throw err;
    }
    return { pid: 1 };
  }

  async jobState(job: JobRef): Promise<JobProcessState> {
    let startedAt: number;
    try {
      startedAt = Number(await readFile(this.file('started', job.instance.instance_id), 'utf8'));
    } catch {
      return { state: 'absent' };
    }
    if (await exists(this.file('stopped', job.instance.instance_id))) return { state: 'exited', pid: 1, exit_code: 143 };
    return Date.now() - startedAt >= this.jobDurationMs ? { state: 'exited', pid: 1, exit_code: 0 } : { state: 'running', pid: 1 };
  }

  async stopJob(job: JobRef): Promise<void> {
    await writeFile(this.file('stopped', job.instance.instance_id), '');
  }

  /** Stops the attempt's "job"; its instance holds nothing to give back. */
  async releaseJob(job: JobRef): Promise<void> {
    await this.stopJob(job);
  }

  /** Nothing reads a simulated node's address book. */
  async writePeers(): Promise<void> {}

  async releaseRun(runId: string, submission: number): Promise<void> {
    await writeFile(this.file('closed', `${runId}/${submission}`), '');
  }

  async readLog(): Promise<LogChunk> {
    return { data: '', next_offset: 0 };
  }

  /** Every probe of a simulated node succeeds at once. */
  async exec(): Promise<{ exit_code: number; output: string }> {
    return { exit_code: 0, output: '' };
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await readFile(path);
    return true;
  } catch {
    return false;
  }
}
