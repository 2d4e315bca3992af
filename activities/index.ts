import type { Backend, Instance, JobRef, LogChunk, ProvisionRequest } from '../src/backends/backend';
import type { AddressBook } from '../workflows/messages';
import type { JobPlan, Plan, ReadyProbe } from '../src/plan/plan-schema';
import { createProvisioningActivities } from './provisioning';
import { createJobActivities } from './jobs';
import { createJobBatchActivities } from './job-batches';
import type { BatchJobFailure } from '../workflows/failure-types';
import { createTeardownActivities } from './teardown';
import { createFleetActivities, type ProbeHostInput, type ProbeHostResult } from './fleet';

/** The backends a worker can drive, by the name a run asks for (`local`, `ssh`, …). */
export type BackendRegistry = Readonly<Record<string, Backend>>;

export interface BackendCall {
  backend: string;
}

export interface ProvisionInput extends BackendCall {
  request: ProvisionRequest;
}

export interface JobCall extends BackendCall {
  job: JobRef;
}

/** Everything the runner needs to write a job's files; the group's commands are interpolated on the node's side. */
export interface StartJobInput extends JobCall {
  run: Pick<Plan, 'run_name' | 'nodes_num' | 'env' | 'image' | 'working_dir'>;
  run_uid: string;
  plan_job: JobPlan;
  addresses: AddressBook;
  /** Nodes per group, in group order: to turn the address book into groups[i].nodes[j]. */
  group_sizes: number[];
}

/** A group's provisioned jobs, whose runners must all answer within `timeout_s`. */
export interface WaitRunnersInput extends BackendCall {
  jobs: JobRef[];
  timeout_s: number;
}

/** A batch of one group's jobs to start and supervise; events go to the run's workflow. */
export interface RunJobsInput extends BackendCall {
  run_workflow_id: string;
  submission: number;
  run: StartJobInput['run'];
  run_uid: string;
  /** Sent once per batch by runs begun before `addressesReady`; null: read from the run (runAddressBook). */
  addresses: AddressBook | null;
  group_sizes: number[];
  jobs: Array<{ ref: JobRef; plan_job: JobPlan }>;
  /** The group's readiness probe, if it has one. */
  probe: ReadyProbe | null;
  interval_ms: number;
}

/** Where a run's address book is read from. */
export interface AddressBookInput {
  run_workflow_id: string;
  submission: number;
}

export interface WatchJobInput extends JobCall {
  interval_ms: number;
}

export interface WaitReadyInput extends JobCall {
  probe: ReadyProbe;
  /** Epoch ms by which the node must be ready. */
  deadline_ms: number;
  /** `group/rank` for messages. */
  label: string;
}

export interface StopJobsInput extends BackendCall {
  jobs: JobRef[];
  grace_s: number;
}

export interface ReleaseRunInput extends BackendCall {
  run_id: string;
  submission: number;
}

export interface ReadLogInput extends JobCall {
  offset: number;
  limit_bytes: number;
}

export type { ProbeHostInput, ProbeHostResult } from './fleet';

export interface TroupeActivities {
  probeFleetHost(input: ProbeHostInput): Promise<ProbeHostResult>;
  describeBackend(input: BackendCall): Promise<{ group_provisioning: boolean }>;
  provisionJobs(input: ProvisionInput): Promise<Instance[]>;
  waitRunnersReady(input: WaitRunnersInput): Promise<{ failed: Array<BatchJobFailure & { job_num: number }> }>;
  runJobs(input: RunJobsInput): Promise<void>;
  /** The run's address book (its `runAddressBook` query), for a group that needs it in its own code. */
  readAddressBook(input: AddressBookInput): Promise<AddressBook>;
  /** Per-job activities of runs started before batches (kept so their histories go on). */
  waitRunnerReady(input: JobCall): Promise<void>;
  startJob(input: StartJobInput): Promise<{ pid: number }>;
  watchJob(input: WatchJobInput): Promise<{ exit_code: number }>;
  waitJobReady(input: WaitReadyInput): Promise<void>;
  stopJobs(input: StopJobsInput): Promise<void>;
  releaseRun(input: ReleaseRunInput): Promise<void>;
  readJobLog(input: ReadLogInput): Promise<LogChunk>;
}

export function createActivities(backends: BackendRegistry): TroupeActivities {
  return {
    ...createProvisioningActivities(backends),
    ...createJobActivities(backends),
    ...createJobBatchActivities(backends),
    ...createTeardownActivities(backends),
    ...createFleetActivities(),
  };
}
