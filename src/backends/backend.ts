import { z } from 'zod';
import type { GroupPlan, JobPlan } from '../plan/plan-schema';
import type { JobFiles, PeersFile, ReadinessState } from '../runner/node-files';
import type { JobUsage } from './job-usage';

export type { JobFiles, NodeReadyProbe, NodeSshKeys, PeersFile, ReadinessState } from '../runner/node-files';

/**
 * A backend provisions jobs onto machines and runs their commands there. Every method is
 * idempotent, keyed by run id, submission number and job number: an activity retried or replayed
 * after a worker crash must never take a second machine or start a second process.
 */

/** A machine (or a slot on one) that holds exactly one job of one run. */
export const InstanceSchema = z.object({
  /** Stable id of this job's instance, unique per (run, submission, job). */
  instance_id: z.string(),
  /** What users call the machine: a hostname or address, or `local`. */
  host: z.string(),
  /** The address peers use to reach this node. */
  internal_ip: z.string(),
  gpus: z.number().int().nonnegative(),
  /** Backend-specific facts the backend needs later (namespace name, fleet host index…). */
  details: z.record(z.string(), z.string()),
});
export type Instance = z.infer<typeof InstanceSchema>;

export const JobRefSchema = z.object({
  run_id: z.string(),
  run_name: z.string(),
  /** 0 for the first submission, +1 for every resubmission by `retry`. */
  submission: z.number().int().nonnegative(),
  job_num: z.number().int().nonnegative(),
  job_name: z.string(),
  /**
   * 0 (or absent) for a node's first machine; +1 each time the run replaces the node (a restart) or
   * gives its rank to a new node (a resize). Part of the backend's key: every attempt has its own
   * instance, job directory and log.
   */
  attempt: z.number().int().nonnegative().optional(),
  instance: InstanceSchema,
});
export type JobRef = z.infer<typeof JobRefSchema>;

/** A submission a backend holds something for (heldRuns). */
export interface HeldRun {
  run_workflow_id: string;
  /** The run's uid (its first execution's run id), as in ProvisionRequest.run_id. */
  run_id: string;
  submission: number;
  /** What it holds, for the reaper's log and `troupe stop`: `2 nodes on the local fleet`. */
  holds: string;
}

export interface ProvisionRequest {
  run_id: string;
  /**
   * The run's workflow id: what the worker's reaper asks Temporal about to learn whether the run
   * has closed (src/worker/run-reaper.ts). Absent in requests made outside a run (tests).
   */
  run_workflow_id?: string;
  run_name: string;
  submission: number;
  group: GroupPlan;
  /** One job, or a group's whole batch when the backend supports group provisioning. */
  jobs: JobPlan[];
  /** Fleet names the run may use, if it names any. */
  fleets: string[] | null;
}

/** How many more nodes of a group a run asks room for (a resize that adds them). */
export interface RoomRequest {
  group: GroupPlan;
  /** New nodes wanted, 1 or more. */
  count: number;
  /** Fleet names the run may use, if it names any. */
  fleets: string[] | null;
}

/** How many of the asked nodes the fleet could place now. */
export interface Room {
  /** The fleet as users call it: `fleet gpus`, `the local fleet`. */
  fleet: string;
  /** 0..count. */
  fits: number;
  /** Why no more fit, when `fits` < count (else null). */
  reason: string | null;
}

export type JobProcessState =
  | { state: 'running'; pid: number }
  /** `reason`: why it ended in a user's words, when the backend knows more than the code (the kernel killed it for its memory limit). */
  | { state: 'exited'; pid: number; exit_code: number; reason?: string }
  /** Never started on this instance (or its directory is gone). */
  | { state: 'absent' };

export interface LogChunk {
  data: string;
  next_offset: number;
}

/**
 * What a backend can do, asked once per run (the `describeBackend` activity) and carried by the run
 * and its groups: the paths a run takes follow from these, never from the backend's name.
 */
export const BackendCapabilitiesSchema = z.object({
  /** One provision() call may place a whole group's batch. */
  group_provisioning: z.boolean(),
  /**
   * provision() places nodes on the worker's own machine, in milliseconds: the group provisions as a
   * local activity, inside its workflow task, without the two round trips through the server an
   * activity takes (schedule, then its result in a new task).
   */
  provisions_on_worker: z.boolean(),
});
export type BackendCapabilities = z.infer<typeof BackendCapabilitiesSchema>;

export interface Backend {
  readonly kind: string;
  /** True when one provision() call may place a whole group's batch. */
  readonly groupProvisioning: boolean;
  /** True when provision() places nodes on the worker's own machine (BackendCapabilities.provisions_on_worker); absent: false. */
  readonly provisionsOnWorker?: boolean;
  /** Places the jobs; throws NoCapacityError when the fleet cannot hold them. */
  provision(req: ProvisionRequest): Promise<Instance[]>;
  /**
   * How many of `count` more nodes of the group would find a machine now, by provision()'s own
   * rule, without taking any: a resize is refused before anything changes when they do not all fit.
   * A preview (another run may take the room first; provision() still decides).
   */
  room(req: RoomRequest): Promise<Room>;
  /** The job's directory on its node (env, hostfile, launch script, log, pid, exit code). */
  jobDirectory(job: JobRef): string;
  /** True when the instance can run commands now. */
  runnerReady(job: JobRef): Promise<boolean>;
  /** Writes the job's files and starts its commands detached; returns the existing pid if already started. */
  startJob(job: JobRef, files: JobFiles): Promise<{ pid: number }>;
  jobState(job: JobRef): Promise<JobProcessState>;
  /**
   * Stops the job's whole process group: SIGTERM, then SIGKILL after the grace period. Idempotent.
   * Also claims the job's start so that a startJob still in flight (a retried activity) never
   * starts it afterwards.
   */
  stopJob(job: JobRef, graceSeconds: number): Promise<void>;
  /**
   * Optional: stopJob for many jobs at once, cheaper than a call each (the local fleet looks at the
   * machine's processes once for all of them). Every job is tried; resolves with the ones that could
   * not be stopped (none: all stopped). Without it, stopJob is called for each.
   */
  stopJobs?(jobs: readonly JobRef[], graceSeconds: number): Promise<JobStopFailure[]>;
  /**
   * Gives back every instance that this submission of the run holds, including ones whose
   * provision() result never reached the workflow, and refuses later provision() calls for that
   * submission (a late retry must not take a machine after teardown). Idempotent.
   */
  releaseRun(runId: string, submission: number): Promise<void>;
  readLog(job: JobRef, offset: number, limitBytes: number): Promise<LogChunk>;
  /**
   * Gives back the instance of one job attempt (its process stopped first, as stopJob), leaving
   * the rest of the submission as it is: a node replaced by a restart, or removed by a resize.
   * Its log and exit code stay, as after releaseRun. Idempotent; releaseRun still covers it.
   */
  releaseJob(job: JobRef, graceSeconds: number): Promise<void>;
  /**
   * Replaces the job's `peers.json` atomically with this version of the address book, readable by
   * the job's user only; never replaces a later version with an earlier one (a retried call).
   * A job whose directory is gone (released) is left alone.
   */
  writePeers(job: JobRef, peers: PeersFile): Promise<void>;
  /**
   * Runs a short bash script on the job's node, in its network (readiness probes run where the job
   * runs, not from the worker's network). Resolves with the exit code and the first line of output;
   * a script still running after `timeoutMs` is killed and counts as exit code 124.
   */
  exec(job: JobRef, script: string, timeoutMs: number): Promise<ExecResult>;
  /**
   * Optional: a backend that runs the readiness probe on the node (JobFiles.ready_probe) and
   * pushes its outcome answers here, without a command per probe; the outcome is on the node's
   * disk, so it survives a worker crash. Without it, the probe runs through exec() every interval.
   */
  readiness?(job: JobRef): Promise<ReadinessState>;
  /**
   * Optional: the ends of running jobs pushed instead of polled. From the call on, `changed` names
   * a job (at least once) whenever it may have ended, also when it had ended before the call (while
   * no worker ran, say): a caller that checked a job with jobState() after the call need not check it
   * again until it is named. A job the backend cannot watch now is named every `pollMs` instead.
   * Without it, every running job is checked with jobState() every interval.
   */
  watchEnds?(jobs: JobRef[], pollMs: number, changed: (jobNums: number[]) => void): JobEndWatch;
  /**
   * Optional: the submissions this backend still holds anything for (processes, machines, users,
   * files), with the workflow id of their run. The worker's reaper releases (releaseRun) those whose
   * run has closed without its teardown (terminated, timed out, reset away).
   */
  heldRuns?(): Promise<HeldRun[]>;
  /**
   * Optional: what the running job uses now on its node (CPU time, memory, the node's GPUs), read
   * there (its cgroup, else its processes; the GPU vendor's tool). Null when the job is not running.
   * Figures only: nothing the job prints.
   */
  usage?(job: JobRef): Promise<JobUsage | null>;
}

/** A job stopJobs() could not stop, and why. */
export interface JobStopFailure {
  job: JobRef;
  error: unknown;
}

/** What watchEnds() returns. */
export interface JobEndWatch {
  /** No more names: what it holds for the watch (descriptors, requests to its helper) is let go. */
  close(): void;
}

export interface ExecResult {
  exit_code: number;
  output: string;
}

/** The fleet cannot hold the requested jobs now; retried while the run's retry covers `no-capacity`. */
export class NoCapacityError extends Error {
  override readonly name = 'NoCapacityError';
}

/** The instance stopped answering (host lost); the job fails with INSTANCE_UNREACHABLE. */
export class InstanceUnreachableError extends Error {
  override readonly name = 'InstanceUnreachableError';
}

/** startJob(): the job cannot start on its instance and trying again cannot help (an image on a host without a container runtime). */
export class CannotStartError extends Error {
  override readonly name = 'CannotStartError';
}

/** provision() for a submission already released by releaseRun(): never retried. */
export class SubmissionClosedError extends Error {
  override readonly name = 'SubmissionClosedError';
}
