/** What the activities take and give: a module of types alone, so that every activity file and the workflows can import it without a circle. */
import type { Backend, JobRef, PeersFile, ProvisionRequest, RoomRequest } from '../src/backends/backend';
import type { AddressBook } from '../src/contract/messages';
import type { JobPlan, Plan, ReadyProbe, ServiceProbe } from '../src/plan/plan-schema';
import type { ServiceTableInput } from '../src/gateway/routing-table';

/** The backends a worker can drive, by the name a run asks for (`local`, `ssh`, …). */
export type BackendRegistry = Readonly<Record<string, Backend>>;

export interface BackendCall {
  backend: string;
}

export interface ProvisionInput extends BackendCall {
  request: ProvisionRequest;
}

export interface RoomInput extends BackendCall {
  request: RoomRequest;
}

export interface JobCall extends BackendCall {
  job: JobRef;
}

/** What the runner needs of the run to write a job's files. */
export type RunOfJob = Pick<Plan, 'run_name' | 'nodes_num' | 'env' | 'image' | 'working_dir'>;

/** A group's provisioned jobs, whose runners must all answer within `timeout_s`. */
export interface WaitRunnersInput extends BackendCall {
  jobs: JobRef[];
  timeout_s: number;
}

/** A batch of one group's jobs to start and supervise; events go to the run's workflow. */
export interface RunJobsInput extends BackendCall {
  run_workflow_id: string;
  submission: number;
  run: RunOfJob;
  run_uid: string;
  /** The book when the run sent it to the group (small runs); null: read from the run (runAddressBook). */
  addresses: AddressBook | null;
  group_sizes: number[];
  /** The run's group names in group order (node names in each node's /etc/hosts); absent in older histories: named by index. */
  group_names?: string[];
  jobs: Array<{ ref: JobRef; plan_job: JobPlan }>;
  /** The group's readiness probe, if it has one. */
  probe: ReadyProbe | null;
  interval_ms: number;
}

export interface StopJobsInput extends BackendCall {
  jobs: JobRef[];
  grace_s: number;
}

/** A version of the live address book for these jobs' peers.json, then each group's on_peers_change on its nodes. */
export interface PublishPeersInput extends BackendCall {
  peers: PeersFile;
  jobs: JobRef[];
  hooks: Array<{ job: JobRef; label: string; command: string }>;
  hook_timeout_s: number;
}

/** How each hook ended: its exit code and first line of output. */
export interface PublishPeersResult {
  hooks: Array<{ job_num: number; label: string; exit_code: number; output: string }>;
}

/** Job attempts whose machines go back (their processes stopped first, with this grace). */
export interface ReleaseJobsInput extends BackendCall {
  jobs: JobRef[];
  grace_s: number;
}

export interface ReleaseRunInput extends BackendCall {
  run_id: string;
  submission: number;
}

/** A run's execution that a group child names as its parent, and the uid it claims for it. */
export interface VerifyRunExecutionInput {
  workflow_id: string;
  run_id: string;
  run_uid: string;
}

export interface ReadLogInput extends JobCall {
  offset: number;
  limit_bytes: number;
}

/** A service's whole routing table, for every gateway of the worker; its generation grows with each push. */
export interface PushServiceTableInput {
  table: ServiceTableInput;
}

/** Where users reach the service: per gateway `<data plane>/services/<run>/`, and `http://<run>.<domain>[:port]/` where it has a domain. */
export interface PushServiceTableResult {
  endpoints: string[];
}

export interface RemoveServiceTableInput {
  run: string;
}

/** Replicas (their `http://ip:port` as the table listed them) the run's table no longer lists, to wait out. */
export interface DrainReplicasInput {
  run: string;
  urls: string[];
  timeout_s: number;
}

/** Requests still in flight to them at the end (0: drained), and the gateways that did not answer. */
export interface DrainReplicasResult {
  left: number;
  silent_gateways: string[];
}

/** Gate A of a rollout: a synthetic request to each of the new revision's entry replicas (activities/synthetic-request.ts). */
export interface ReadReplicaMetricsInput {
  /** Each replica's metrics URL, its group, and the metrics to sum. */
  targets: Array<{ group: number; url: string; names: string[] }>;
}

/** Per replica: the sums by metric name (a name with no sample is absent), or why it could not be read. */
export interface ReadReplicaMetricsResult {
  replicas: Array<{ group: number; url: string; values: Record<string, number> | null; error: string | null }>;
}

export interface CheckRevisionInput {
  urls: string[];
  /** The entry group's first probe, or null: `GET /`. */
  probe: ServiceProbe | null;
  /**
   * The service's run and the revision's number in its routing table: with both, every gateway of the
   * worker sends the request too, by its own way to the replicas. Without: from the worker only.
   */
  run?: string;
  revision?: number;
}

/** `error`: the first request that failed (which replica, what came back); null: all passed, `note` says how. */
export interface CheckRevisionResult {
  error: string | null;
  note: string | null;
}

/** A service's figures over the last `window_s` seconds, asked of every gateway (a rollout's gates and the autoscaler read them). */
export interface ReadServiceFiguresInput {
  run: string;
  window_s: number;
}

/**
 * Per revision, over every gateway that answered: answers and errors summed, p95 the highest any
 * gateway saw (each gateway's percentile is exact for its own requests; they cannot be merged from here).
 */
export interface ReadServiceFiguresResult {
  revisions: Array<{ revision: number; requests: number; errors: number; p95_ms: number | null }>;
  /** Per revision and entry group, summed over the gateways: requests that arrived in the window, requests in flight now. */
  groups: Array<{ revision: number; group: string; requests: number; inflight: number }>;
  /** Summed over the gateways: requests held now for want of a ready entry replica, and those held in the window. */
  held: number;
  held_total: number;
  silent_gateways: string[];
}
