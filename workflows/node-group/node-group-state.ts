import { setHandler } from '@temporalio/workflow';
import type { Instance, JobRef } from '../../src/backends/backend';
import { newJobRef } from '../../src/backends/job-ref';
import type { JobPlan } from '../../src/plan/plan-schema';
import { addressesReadySignal, mayStartSignal, newAttemptsSignal, startAttemptsSignal, unlockGroupSignal, type AddressBook } from '../../src/contract/messages';
import type { NodeGroupInput } from '../../src/contract/node-group-input';

/** One group child as plain data: what the run told it and where its jobs are. */
export interface GroupState {
  unlocked: boolean;
  /** Every job of the run has its address. */
  addressesReady: boolean;
  /** The book, when the run sent it (small runs); else the activities read it from the run. */
  addresses: AddressBook | null;
  /** Jobs the run lets start. */
  mayStart: Set<number>;
  /** Where each provisioned job is. */
  instances: Map<number, Instance>;
  /** Jobs whose runner answered. */
  runnerReady: Set<number>;
  /** Jobs handed to a batch, or whose runner never answered: nothing more to do for them here. */
  settled: Set<number>;
  /** The runners' wait has ended, answered or not. */
  runnersAnswered: boolean;
  /** Reports to the run not yet awaited. */
  inFlight: Array<Promise<void>>;
  /** New attempts the run asked for (restarts, resizes), not yet taken up. */
  attemptRequests: Array<{ jobs: JobPlan[]; release: JobRef[] }>;
  /** New attempts the run lets start (`job_num.attempt`), with the book to start them with. */
  attemptStarts: Map<string, AddressBook>;
}

export const attemptKey = (jobNum: number, attempt: number): string => `${jobNum}.${attempt}`;

export function newGroupState(input: NodeGroupInput): GroupState {
  return {
    unlocked: input.unlocked,
    addressesReady: false,
    addresses: null,
    mayStart: new Set(),
    instances: new Map(),
    runnerReady: new Set(),
    settled: new Set(),
    runnersAnswered: false,
    inFlight: [],
    attemptRequests: [],
    attemptStarts: new Map(),
  };
}

/** The run's signals to the group: each only records into its state. */
export function setGroupHandlers(group: GroupState): void {
  setHandler(unlockGroupSignal, () => {
    group.unlocked = true;
  });
  setHandler(addressesReadySignal, ({ job_nums, book }) => {
    group.addressesReady = true;
    if (book) group.addresses = book;
    for (const n of job_nums) group.mayStart.add(n);
  });
  setHandler(mayStartSignal, ({ job_nums, book }) => {
    if (book) group.addresses = book;
    for (const n of job_nums) group.mayStart.add(n);
  });
  setHandler(newAttemptsSignal, (request) => {
    group.attemptRequests.push(request);
  });
  setHandler(startAttemptsSignal, ({ jobs, book }) => {
    for (const { job_num, attempt } of jobs) group.attemptStarts.set(attemptKey(job_num, attempt), book);
  });
}

export function jobRef(input: NodeGroupInput, group: GroupState, job: JobPlan): JobRef {
  return newJobRef({ run_id: input.run_uid, run_name: input.run.run_name, submission: input.submission }, job, job.attempt, group.instances.get(job.job_num) as Instance);
}

/** Placed jobs that may start now: addresses known, runner ready, let start by the run, not yet handed off. */
export function startableJobs(group: GroupState, placed: JobPlan[]): JobPlan[] {
  return placed.filter(
    (job) => group.addressesReady && group.runnerReady.has(job.job_num) && group.mayStart.has(job.job_num) && !group.settled.has(job.job_num),
  );
}

/** `10.213.0.2 (local)`, or the first address and how many more. */
export function hostsOf(jobs: JobRef[]): string {
  const first = jobs[0]?.instance;
  if (!first) return '';
  const where = `${first.internal_ip} (${first.host})`;
  return jobs.length === 1 ? where : `${where} and ${jobs.length - 1} more`;
}

/** `prefill/0`, or `prefill/0-3` for a batch. */
export function labelOf(jobs: JobPlan[]): string {
  const first = jobs[0];
  const last = jobs[jobs.length - 1];
  if (!first || !last) return '';
  const range = first === last ? `${first.node_group_job_index}` : `${first.node_group_job_index}-${last.node_group_job_index}`;
  return `${first.node_group_name}/${range}`;
}
