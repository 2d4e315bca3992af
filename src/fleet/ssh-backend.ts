import { setTimeout as sleep } from 'node:timers/promises';
import {
  CannotStartError,
  InstanceUnreachableError,
  SubmissionClosedError,
  type Backend,
  type ExecResult,
  type HeldRun,
  type ReadinessState,
  type Instance,
  type JobFiles,
  type JobProcessState,
  type JobRef,
  type LogChunk,
  type PeersFile,
  type ProvisionRequest,
  type Room,
  type RoomRequest,
} from '../backends/backend';
import { newJobRef } from '../backends/job-ref';
import { FleetNotFoundError, type FleetClient } from './fleet-client';
import { describeResources, freeFittingHosts } from './host-match';
import { hostsFor } from './placement-preview';
import type { FleetState, HeldHost } from '../contract/fleet-schemas';
import { isHeldBy } from './job-holder';
import { defaultJobBaseDir } from '../backends/ssh/detect';
import { HostKeyTrust } from '../backends/ssh/host-key-trust';
import { NoContainerRuntimeError, SshRunner } from '../backends/ssh/ssh-runner';
import { describeTarget, formatHostPort, SshTargetSchema, type SshTarget } from '../backends/ssh/target';
import type { SshTimeouts } from '../backends/ssh/timeouts';
import type { JobUsage } from '../backends/job-usage';
import { DEFAULT_PIDS_MAX, jobLimits } from '../backends/cgroup-limits';
import { SHM_BYTES_DETAIL, shmBytesOf } from '../backends/ssh/container-limits';

/** Clean-ups of a run on a host that answers, before the failure is reported (the host is never taken for lost for it). */
const CLEANUP_TRIES = 3;
const CLEANUP_RETRY_MS = 1_000;

/** Where on a host jobs live; the default is `~/.troupe/jobs` of the SSH user. */
export type JobBaseDirResolver = (host: { fleet: string; hostname: string; port: number; home: string }) => string;

export interface SshBackendOptions {
  /** The fleets' workflows (allocation, release, state). */
  fleets: FleetClient;
  /** Overrides of the SSH timeouts of this backend's connections (keepalive decides how fast a lost host shows). */
  timeouts?: Partial<SshTimeouts>;
  jobBaseDir?: JobBaseDirResolver;
  /**
   * How long stopping and cleaning up keep trying a host that does not answer before giving it up
   * as lost (teardown then goes on, and the fleet marks the host unreachable). Default 30 s.
   */
  unreachableLimitMs?: number;
  /** SIGTERM → SIGKILL grace when releaseRun finds a job still running. Default 5 s. */
  releaseGraceSeconds?: number;
  /** Most processes (and threads) of one job at once on a host that takes limits (Troupe's own; cgroup-limits.ts): the worker's TROUPE_SSH_PIDS_MAX. Default DEFAULT_PIDS_MAX. */
  pidsMax?: number;
}

/** What a job's Instance carries (all strings) so that any worker can reach its host later. */
interface SshInstanceDetails {
  fleet: string;
  host_index: string;
  /** JSON of the SshTarget, whose only accepted host keys are the ones the fleet verified. */
  target: string;
  host_key: string;
  base_dir: string;
  /** JSON of the job's cgroup limits from its group's `resources` (cgroup-limits.ts), set where the job is placed. */
  limits?: string;
  /** The job's /dev/shm in bytes from its group's `resources.shm_size`, for a job with `image:` (container-limits.ts); absent: the runtime's default. */
  shm_bytes?: string;
}

const GIVEN_UP_MEMORY_MS = 10 * 60_000;

/**
 * One job attempt's instance id: stable per fleet, run, submission, job and attempt (it marks the
 * job's processes on the host); attempt 0 has the id jobs had before attempts existed.
 */
export function sshInstanceId(fleet: string, runId: string, submission: number, jobNum: number, attempt = 0): string {
  return `ssh:${fleet}:${runId}:${submission}:${jobNum}${attempt ? `:attempt-${attempt}` : ''}`;
}

/** The fleet the run's jobs go to: the first it names. */
function fleetOf(fleets: string[] | null, who: string): string {
  const fleet = fleets?.[0];
  if (fleet) return fleet;
  throw new Error(`${who}: the ssh backend places jobs on a fleet and the run names none: pass --fleet NAME to \`troupe apply\`, or set \`fleets: [NAME]\` in the task`);
}

/**
 * The SSH fleet backend: each job gets a whole host of a fleet (an allocation Update on the
 * fleet's workflow), and runs there through the SshRunner over pooled connections whose host key
 * must be the one the fleet verified when it probed the host. One job per provision() call: the
 * staged unlock's one-by-one path.
 */
export class SshBackend implements Backend {
  readonly kind = 'ssh';
  readonly groupProvisioning = false;
  private readonly runners = new Map<string, SshRunner>();
  /** Keys come only from the targets' fingerprints (what the fleet verified); nothing is ever pinned here. */
  private readonly trust = new HostKeyTrust({ knownHostsFiles: [], allowPinning: false });
  /** Fleets this worker placed jobs on (visibility may lag behind a fleet that was just created). */
  private readonly usedFleets = new Set<string>();
  /** Hosts given up as lost by a stop, so the clean-up right after does not wait for them again. */
  private readonly givenUp = new Map<string, { at: number; reason: string }>();

  constructor(private readonly options: SshBackendOptions) {}

  async provision(req: ProvisionRequest): Promise<Instance[]> {
    const fleet = fleetOf(req.fleets, `run ${req.run_name}`);
    this.usedFleets.add(fleet);
    const hosts = await this.options.fleets.allocate(fleet, {
      run_id: req.run_id,
      ...(req.run_workflow_id ? { run_workflow_id: req.run_workflow_id } : {}),
      run_name: req.run_name,
      submission: req.submission,
      group_name: req.group.name,
      resources: req.group.resources,
      jobs: req.jobs.map((job) => ({ job_num: job.job_num, job_name: job.job_name, ...(job.attempt ? { attempt: job.attempt } : {}) })),
    });
    const limits = JSON.stringify(jobLimits(req.group.resources, this.options.pidsMax ?? DEFAULT_PIDS_MAX));
    const shm = shmBytesOf(req.group.resources);
    return hosts.map((host) => this.instanceOf(fleet, req.run_id, req.submission, host, limits, shm));
  }

  /** Each node takes a whole free host that fits, as the fleet's allocation decides (pickHosts). */
  async room({ group, count, fleets }: RoomRequest): Promise<Room> {
    const name = fleetOf(fleets, `group ${group.name}`);
    const fleet = `fleet ${name}`;
    const state = await this.options.fleets.state(name);
    if (!state) return { fleet, fits: 0, reason: new FleetNotFoundError(name).message };
    if (state.deleted) return { fleet, fits: 0, reason: 'it is being deleted' };
    const free = freeFittingHosts(state.hosts, group.resources, new Set()).length;
    if (free >= count) return { fleet, fits: count, reason: null };
    return { fleet, fits: free, reason: `hosts for ${describeResources(group.resources)}: ${hostsFor(state, group.resources, new Set())}` };
  }

  private instanceOf(fleet: string, runId: string, submission: number, host: HeldHost, limits?: string, shmBytes: number | null = null): Instance {
    const details: SshInstanceDetails = {
      fleet,
      host_index: String(host.host_index),
      target: JSON.stringify(host.target),
      host_key: host.target.host_key_fingerprints?.[0] ?? '',
      base_dir: this.baseDirOf(fleet, host),
      ...(limits ? { limits } : {}),
      ...(shmBytes !== null ? { [SHM_BYTES_DETAIL]: String(shmBytes) } : {}),
    };
    const { hostname, port } = host.target;
    return {
      instance_id: sshInstanceId(fleet, runId, submission, host.job_num, host.attempt),
      host: port === 22 ? hostname : formatHostPort(hostname, port),
      internal_ip: host.internal_ip,
      gpus: host.gpus,
      details: { ...details },
    };
  }

  private baseDirOf(fleet: string, host: HeldHost): string {
    const { hostname, port } = host.target;
    if (this.options.jobBaseDir) return this.options.jobBaseDir({ fleet, hostname, port, home: host.home });
    if (!host.home) throw new Error(`${describeTarget(host.target)}: the fleet does not know the SSH user's home; apply the fleet again`);
    return defaultJobBaseDir({ home: host.home });
  }

  private runner(target: SshTarget, baseDir: string): SshRunner {
    const key = JSON.stringify([target, baseDir]);
    let runner = this.runners.get(key);
    if (!runner) {
      runner = new SshRunner(target, { trust: this.trust, baseDir, timeouts: this.options.timeouts });
      this.runners.set(key, runner);
    }
    return runner;
  }

  private runnerOf(job: JobRef): SshRunner {
    const { details } = job.instance;
    if (!details.target || !details.base_dir) {
      throw new Error(`${job.job_name}: instance ${job.instance.instance_id} is not an SSH fleet instance (no target in its details)`);
    }
    return this.runner(SshTargetSchema.parse(JSON.parse(details.target)), details.base_dir);
  }

  jobDirectory(job: JobRef): string {
    return this.runnerOf(job).jobDirectory(job);
  }

  async runnerReady(job: JobRef): Promise<boolean> {
    return await this.runnerOf(job).runnerReady();
  }

  /**
   * Starts the job unless its submission was released; a release that lands while the start is
   * under way is caught by a second look afterwards, and the job is stopped again.
   */
  async startJob(job: JobRef, files: JobFiles): Promise<{ pid: number }> {
    const runner = this.runnerOf(job);
    await this.refuseReleased(job);
    const started = await runner.startJob(job, files, { image: files.image ?? null }).catch((err: unknown) => {
      // No docker or podman on the host: trying again cannot help, the job fails now, naming the host.
      if (err instanceof NoContainerRuntimeError) throw new CannotStartError(err.message);
      throw err;
    });
    try {
      await this.refuseReleased(job);
    } catch (err) {
      await runner.stopJob(job, 0).catch(() => undefined);
      throw err;
    }
    return started;
  }

  private async refuseReleased(job: JobRef): Promise<void> {
    const fleet = job.instance.details.fleet ?? '';
    const state = await this.options.fleets.state(fleet);
    if (!state || !holdsHost(state, job)) {
      throw new SubmissionClosedError(
        `${job.job_name}: submission ${job.submission} of run ${job.run_name} no longer holds its host in fleet ${fleet}; it will not start`,
      );
    }
  }

  async jobState(job: JobRef): Promise<JobProcessState> {
    return await this.runnerOf(job).jobState(job);
  }

  /**
   * Stops the job's processes. A host that does not answer is tried until the unreachable limit,
   * then given up (teardown must go on; releaseRun reports the host to the fleet as lost).
   */
  async stopJob(job: JobRef, graceSeconds: number): Promise<void> {
    const runner = this.runnerOf(job);
    try {
      await this.untilReachable(runner, () => runner.stopJob(job, graceSeconds));
    } catch (err) {
      this.giveUp(runner, err);
    }
  }

  async readLog(job: JobRef, offset: number, limitBytes: number): Promise<LogChunk> {
    return await this.runnerOf(job).readLog(job, offset, limitBytes);
  }

  async exec(job: JobRef, script: string, timeoutMs: number): Promise<ExecResult> {
    return await this.runnerOf(job).exec(job, script, timeoutMs);
  }

  async usage(job: JobRef): Promise<JobUsage | null> {
    return await this.runnerOf(job).usage(job);
  }

  async readiness(job: JobRef): Promise<ReadinessState> {
    return await this.runnerOf(job).readiness(job);
  }

  /** Submissions holding hosts in any fleet (holds that name their run's workflow). */
  async heldRuns(): Promise<HeldRun[]> {
    const held = new Map<string, HeldRun & { hosts: number }>();
    for (const fleet of await this.options.fleets.names()) {
      const state = await this.options.fleets.state(fleet);
      for (const { holder } of state?.hosts ?? []) {
        if (!holder?.run_workflow_id) continue;
        const key = `${holder.run_id}/${holder.submission}`;
        const entry = held.get(key) ?? { run_workflow_id: holder.run_workflow_id, run_id: holder.run_id, submission: holder.submission, holds: '', hosts: 0 };
        entry.hosts += 1;
        entry.holds = `${entry.hosts} host${entry.hosts === 1 ? '' : 's'} of SSH fleets`;
        held.set(key, entry);
      }
    }
    return [...held.values()].map(({ hosts: _hosts, ...run }) => run);
  }

  /**
   * Closes the submission in every fleet (no host can be taken for it any more), stops and
   * cleans up whatever it still has on each host it holds, then frees those hosts. A host that
   * cannot be reached is given back as lost: the fleet marks it unreachable. Idempotent.
   */
  async releaseRun(runId: string, submission: number): Promise<void> {
    // Every fleet: a provision still in flight on another worker must find the submission closed.
    // Without visibility (listing failed), the fleets this worker used still get it.
    const listed = await this.options.fleets.names().catch(() => [] as string[]);
    const fleets = new Set([...listed, ...this.usedFleets]);
    const failed: string[] = [];
    await Promise.all(
      [...fleets].map(async (fleet) => {
        const held = await this.options.fleets.closeSubmission(fleet, { run_id: runId, submission });
        if (held === null) return;
        const lost: Array<{ host_index: number; reason: string }> = [];
        await Promise.all(
          held.map(async (host) => {
            const outcome = await this.cleanHost(fleet, runId, submission, host);
            if (outcome.lost !== null) lost.push({ host_index: host.host_index, reason: outcome.lost });
            if (outcome.failed !== null) failed.push(outcome.failed);
          }),
        );
        await this.options.fleets.release(fleet, { run_id: runId, submission, lost });
      }),
    );
    // Reported once the hosts are back in service: the activity's failure names them (a retry finds nothing left to release).
    if (failed.length > 0) {
      throw new Error(`run ${runId}: clean-up failed after ${CLEANUP_TRIES} tries on ${failed.join('; ')}; the hosts stay in service, the run's files may remain there`);
    }
  }

  /**
   * Stops the job a host holds and removes its files there. A host that cannot be reached (past the
   * unreachable limit) is `lost`; a clean-up that fails on a host that answers is tried again, then
   * `failed`: the host stays in service, the failure is reported.
   */
  private async cleanHost(fleet: string, runId: string, submission: number, host: HeldHost): Promise<{ lost: string | null; failed: string | null }> {
    const instance = this.instanceOf(fleet, runId, submission, host);
    const runner = this.runner(host.target, instance.details.base_dir ?? '');
    const job = newJobRef({ run_id: runId, run_name: host.run_name, submission }, host, host.attempt, instance);
    for (let attempt = 1; ; attempt += 1) {
      try {
        await this.untilReachable(runner, async () => {
          await runner.stopJob(job, this.options.releaseGraceSeconds ?? 5);
          // Its own job alone: hosts that share a home directory share the run's directory.
          await runner.cleanupRun(runId, undefined, [runner.jobDirectory(job)]);
        });
        return { lost: null, failed: null };
      } catch (err) {
        if (err instanceof InstanceUnreachableError) return { lost: this.giveUp(runner, err), failed: null };
        if (attempt >= CLEANUP_TRIES) return { lost: null, failed: `${describeTarget(runner.target)}: ${err instanceof Error ? err.message : String(err)}` };
        await sleep(CLEANUP_RETRY_MS * attempt);
      }
    }
  }

  /**
   * Gives back one job attempt's host, the rest of the submission untouched: stops the job, cleans
   * its directory up (cleanupJob: log and exit code stay), then frees the host in its fleet (a
   * host that cannot be reached goes back as lost). Idempotent: the fleet frees a host once.
   */
  async releaseJob(job: JobRef, graceSeconds: number): Promise<void> {
    const runner = this.runnerOf(job);
    let lost: string | null = null;
    try {
      await this.untilReachable(runner, async () => {
        await runner.stopJob(job, graceSeconds);
        await runner.cleanupJob(job);
      });
    } catch (err) {
      lost = this.giveUp(runner, err);
    }
    await this.options.fleets.releaseJobHost(job.instance.details.fleet ?? '', {
      run_id: job.run_id,
      submission: job.submission,
      job_num: job.job_num,
      ...(job.attempt ? { attempt: job.attempt } : {}),
      lost_reason: lost,
    });
  }

  /** Replaces the job's peers.json on its host; a host that does not answer fails the call (the activity retries). */
  async writePeers(job: JobRef, peers: PeersFile): Promise<void> {
    await this.runnerOf(job).writePeers(job, peers);
  }

  /** Runs `body`, trying again while the host does not answer, up to the unreachable limit (less if given up lately). */
  private async untilReachable(runner: SshRunner, body: () => Promise<void>): Promise<void> {
    const key = describeTarget(runner.target);
    const recent = this.givenUp.get(key);
    const limit = recent && Date.now() - recent.at < GIVEN_UP_MEMORY_MS ? 0 : (this.options.unreachableLimitMs ?? 30_000);
    const deadline = Date.now() + limit;
    for (;;) {
      try {
        await body();
        this.givenUp.delete(key);
        return;
      } catch (err) {
        if (!(err instanceof InstanceUnreachableError) || Date.now() >= deadline) throw err;
        await sleep(Math.min(1_000, Math.max(0, deadline - Date.now())));
      }
    }
  }

  private giveUp(runner: SshRunner, err: unknown): string {
    const reason = err instanceof Error ? err.message : String(err);
    this.givenUp.set(describeTarget(runner.target), { at: Date.now(), reason });
    return reason;
  }
}

function holdsHost(state: FleetState, job: JobRef): boolean {
  if (state.closed_submissions.includes(`${job.run_id}/${job.submission}`)) return false;
  return state.hosts.some((h) => isHeldBy(h.holder, job));
}
