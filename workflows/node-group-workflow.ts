import {
  ActivityCancellationType,
  condition,
  getExternalWorkflowHandle,
  isCancellation,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  type LocalActivityOptions,
} from '@temporalio/workflow';
import type { TroupeActivities } from '../activities';
import type { Instance, JobRef } from '../src/backends/backend';
import { LOCAL_BACKEND } from '../src/backends/backend-names';
import type { GroupPlan, JobPlan, Plan, RetryPolicy } from '../src/plan/plan-schema';
import { classifyBatchFailure, FailureType, type BatchJobFailure } from './failure-types';
import { classifyProvisioningFailure, classifyRunningFailure, type ClassifiedFailure } from './failures';
import {
  addressesReadySignal,
  clusterReadySignal,
  jobEventsSignal,
  mayStartSignal,
  unlockGroupSignal,
  type AddressBook,
  type JobEvent,
  type RunOptions,
} from './messages';
import { runJobOneByOne } from './node-group-per-job';

export interface NodeGroupInput {
  run_workflow_id: string;
  run_uid: string;
  submission: number;
  backend: string;
  group_provisioning: boolean;
  group: GroupPlan;
  /** This group's jobs, master first. */
  jobs: JobPlan[];
  run: Pick<Plan, 'run_name' | 'nodes_num' | 'env' | 'image' | 'working_dir' | 'fleets'>;
  group_sizes: number[];
  options: RunOptions;
  /** The run's effective retry policy and when it runs out (epoch ms), for no-capacity retries. */
  retry: RetryPolicy | null;
  retry_deadline_ms: number | null;
  /** Group 0 starts unlocked; every other group waits for the run to unlock it after job 0's attempt. */
  unlocked: boolean;
}

const HEARTBEAT_TIMEOUT = '10s';

/**
 * One node group of a run: provisions its master (or its whole batch), then its other jobs; waits
 * for all their runners while the run gathers the address book; then, each time the run lets some
 * of its jobs start, hands that batch to one activity that starts the jobs and supervises them to
 * their end. Everything learnt goes to the run as signals (from the batch activity itself, once
 * jobs run); the run alone decides order, failure and teardown.
 */
export async function NodeGroupWorkflow(input: NodeGroupInput): Promise<void> {
  let unlocked = input.unlocked;
  let addresses: AddressBook | null = null;
  const mayStart = new Set<number>();
  setHandler(unlockGroupSignal, () => {
    unlocked = true;
  });
  setHandler(clusterReadySignal, (book) => {
    addresses = book;
  });
  /** Every job has its address; the book comes with it (small runs) or the activities read it from the run. */
  let addressesReady = false;
  setHandler(addressesReadySignal, ({ job_nums, book }) => {
    addressesReady = true;
    if (book) addresses = book;
    for (const n of job_nums) mayStart.add(n);
  });
  const haveAddresses = () => addresses !== null || addressesReady;
  setHandler(mayStartSignal, ({ job_nums }) => {
    for (const n of job_nums) mayStart.add(n);
  });

  const run = getExternalWorkflowHandle(input.run_workflow_id);
  const report = (events: JobEvent[]) => run.signal(jobEventsSignal, { submission: input.submission, events });
  const reportFailure = (jobs: JobPlan[], failure: ClassifiedFailure) =>
    report(jobs.map((job) => ({ kind: 'failed' as const, job_num: job.job_num, ...failure })));

  const [master, ...others] = input.jobs;
  if (master === undefined) return;
  const instances = new Map<number, Instance>();
  // Newer runs go on (the next provisioning, the runner wait) in the same workflow task that
  // reports the addresses, instead of one task later; the reports are awaited at the end.
  const reportsInFlight = patched(REPORTS_IN_FLIGHT_PATCH);
  const inFlight: Array<Promise<void>> = [];

  const provision = async (jobs: JobPlan[]): Promise<boolean> => {
    try {
      const provisionInput = {
        backend: input.backend,
        request: {
          run_id: input.run_uid,
          run_name: input.run.run_name,
          submission: input.submission,
          group: input.group,
          jobs,
          fleets: input.run.fleets,
        },
      };
      const summary = { summary: `provision ${labelOf(jobs)}` };
      const placed =
        input.backend === LOCAL_BACKEND && patched(LOCAL_PROVISIONING_HERE_PATCH)
          ? await localProvisionActivities(input).provisionJobs.executeWithOptions(summary, [provisionInput])
          : await provisionActivities(input).provisionJobs.executeWithOptions(summary, [provisionInput]);
      placed.forEach((instance, i) => {
        const job = jobs[i];
        if (job) instances.set(job.job_num, instance);
      });
      const reported = report(jobs.flatMap((job) => {
        const instance = instances.get(job.job_num);
        return instance ? [{ kind: 'provisioned' as const, job_num: job.job_num, instance }] : [];
      }));
      if (reportsInFlight) {
        // Handled now, rethrown where the workflow awaits it (an unhandled rejection fails the task).
        reported.catch(() => undefined);
        inFlight.push(reported);
      } else {
        await reported;
      }
      return true;
    } catch (err) {
      if (isCancellation(err)) throw err;
      await reportFailure(jobs, classifyProvisioningFailure(err));
      return false;
    }
  };

  // The staged unlock: the master's attempt (or the whole batch) first; the rest only after it.
  await condition(() => unlocked);
  if (input.group_provisioning) {
    if (!(await provision(input.jobs))) return;
  } else {
    if (!(await provision([master]))) return;
    const results = await Promise.all(others.map((job) => provision([job])));
    if (results.includes(false)) return;
  }

  if (!patched(GROUP_BATCHES_PATCH)) {
    await condition(haveAddresses);
    // A run upgraded mid-way may say only that the book is ready: these jobs need it here.
    const book = addresses ?? (await batchActivities.readAddressBook({ run_workflow_id: input.run_workflow_id, submission: input.submission }));
    await Promise.all([...inFlight, ...input.jobs.map((job) => runJobOneByOne(input, job, instances.get(job.job_num), book, mayStart, report))]);
    return;
  }

  // Every runner is awaited at once, while the run gathers the address book.
  const placed = input.jobs.filter((job) => instances.has(job.job_num));
  const refOf = (job: JobPlan): JobRef => ({
    run_id: input.run_uid,
    run_name: input.run.run_name,
    submission: input.submission,
    job_num: job.job_num,
    job_name: job.job_name,
    instance: instances.get(job.job_num) as Instance,
  });
  const runnerReady = new Set<number>();
  const settled = new Set<number>();
  let runnersAnswered = false;
  const runners = waitForRunners(input, placed.map(refOf), labelOf(placed)).then(async (failures) => {
    const failedNums = new Set(failures.map((f) => f.job_num));
    for (const job of placed) (failedNums.has(job.job_num) ? settled : runnerReady).add(job.job_num);
    runnersAnswered = true;
    // Runs begun before the patch were told of every group's runners, failures or none.
    if (failures.length > 0 || !patched(NO_EMPTY_REPORTS_PATCH)) {
      await report(failures.map(({ job_num, ...failure }) => ({ kind: 'failed' as const, job_num, ...classifyBatchFailure(failure) })));
    }
  });

  // Then the jobs the run lets start, a batch at a time: started and supervised by one activity.
  const batches: Array<Promise<void>> = [];
  const startable = () => placed.filter((job) => haveAddresses() && runnerReady.has(job.job_num) && mayStart.has(job.job_num) && !settled.has(job.job_num));
  for (;;) {
    await condition(() => startable().length > 0 || (runnersAnswered && placed.every((job) => settled.has(job.job_num))));
    const batch = startable();
    if (batch.length === 0) break;
    batch.forEach((job) => settled.add(job.job_num));
    batches.push(runBatch(input, batch.map((job) => ({ ref: refOf(job), plan_job: job })), addresses, report));
  }
  await Promise.all([runners, ...batches, ...inFlight]);
}

/** Marks histories whose groups run jobs in batches (runs begun before it run one job at a time). */
export const GROUP_BATCHES_PATCH = 'group-batches';
/** Marks histories whose groups tell the run of runners only when some never came. */
export const NO_EMPTY_REPORTS_PATCH = 'no-empty-runner-reports';
/** Marks histories whose groups do not wait for the run to take a report of addresses before going on. */
export const REPORTS_IN_FLIGHT_PATCH = 'reports-in-flight';

/** Waits for the runners of all the group's placed jobs; returns the ones that never answered. */
async function waitForRunners(input: NodeGroupInput, jobs: JobRef[], label: string): Promise<Array<BatchJobFailure & { job_num: number }>> {
  if (jobs.length === 0) return [];
  try {
    const { failed } = await batchActivities.waitRunnersReady.executeWithOptions({ summary: `wait for the runners of ${label} on ${hostsOf(jobs)}` }, [
      { backend: input.backend, jobs, timeout_s: input.options.runner_ready_timeout_s },
    ]);
    return failed;
  } catch (err) {
    if (isCancellation(err)) throw err;
    const { message } = classifyRunningFailure(err);
    return jobs.map((job) => ({ job_num: job.job_num, type: 'RunnerWaitFailed', message }));
  }
}

/**
 * One activity starts the batch and supervises it until its last job ends; it reports to the run
 * itself. `addresses` null: the activity reads the book from the run.
 */
async function runBatch(
  input: NodeGroupInput,
  jobs: Array<{ ref: JobRef; plan_job: JobPlan }>,
  addresses: AddressBook | null,
  report: (events: JobEvent[]) => Promise<void>,
): Promise<void> {
  const refs = jobs.map((j) => j.ref);
  try {
    await supervisedActivities.runJobs.executeWithOptions(
      { summary: `run ${labelOf(jobs.map((j) => j.plan_job))} on ${hostsOf(refs)}` },
      [
        {
          backend: input.backend,
          run_workflow_id: input.run_workflow_id,
          submission: input.submission,
          run: { run_name: input.run.run_name, nodes_num: input.run.nodes_num, env: input.run.env, image: input.run.image, working_dir: input.run.working_dir },
          run_uid: input.run_uid,
          addresses,
          group_sizes: input.group_sizes,
          jobs,
          probe: input.group.ready ?? null,
          interval_ms: input.options.watch_interval_ms,
        },
      ],
    );
  } catch (err) {
    if (isCancellation(err)) throw err;
    // Jobs that already ended keep their outcome: the run ignores events for them.
    const failure = classifyRunningFailure(err);
    await report(refs.map((ref) => ({ kind: 'failed' as const, job_num: ref.job_num, ...failure })));
  }
}

/** `10.213.0.2 (local)`, or the first address and how many more. */
function hostsOf(jobs: JobRef[]): string {
  const first = jobs[0]?.instance;
  if (!first) return '';
  const where = `${first.internal_ip} (${first.host})`;
  return jobs.length === 1 ? where : `${where} and ${jobs.length - 1} more`;
}

/** `prefill/0`, or `prefill/0-3` for a batch. */
function labelOf(jobs: JobPlan[]): string {
  const first = jobs[0];
  const last = jobs[jobs.length - 1];
  if (!first || !last) return '';
  const range = first === last ? `${first.node_group_job_index}` : `${first.node_group_job_index}-${last.node_group_job_index}`;
  return `${first.node_group_name}/${range}`;
}

/** No capacity is retried while the run's retry covers it and its duration lasts; other errors a few times. */
function provisionOptions(input: NodeGroupInput): LocalActivityOptions {
  const retriesNoCapacity = input.retry?.on_events.includes('no-capacity') === true && input.retry_deadline_ms !== null;
  const remainingMs = retriesNoCapacity ? Math.max(1_000, (input.retry_deadline_ms ?? 0) - Date.now()) : null;
  return {
    startToCloseTimeout: `${input.options.provision_attempt_timeout_s}s`,
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    ...(remainingMs !== null ? { scheduleToCloseTimeout: remainingMs } : {}),
    retry: {
      initialInterval: '1s',
      backoffCoefficient: 2,
      maximumInterval: '30s',
      ...(retriesNoCapacity ? {} : { maximumAttempts: 5 }),
      nonRetryableErrorTypes: [
        FailureType.SubmissionClosed,
        FailureType.UnknownBackend,
        ...(retriesNoCapacity ? [] : [FailureType.NoCapacity]),
      ],
    },
  };
}

function provisionActivities(input: NodeGroupInput) {
  return proxyActivities<TroupeActivities>({ ...provisionOptions(input), heartbeatTimeout: HEARTBEAT_TIMEOUT });
}

/**
 * The local fleet is the machine of the worker that runs the group's workflow task, and it
 * provisions in milliseconds: provisioned as a local activity, inside that task, without the two
 * round trips through the server an activity takes (schedule, then its result in a new task).
 */
function localProvisionActivities(input: NodeGroupInput) {
  return proxyLocalActivities<TroupeActivities>(provisionOptions(input));
}

/** Marks histories whose local-fleet groups provision with a local activity. */
export const LOCAL_PROVISIONING_HERE_PATCH = 'local-provisioning-here';


const batchActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '3650 days',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  retry: { initialInterval: '500ms', maximumInterval: '10s', nonRetryableErrorTypes: [FailureType.UnknownBackend] },
});

/** Lasts as long as the batch's jobs; a crashed worker's activity is picked up again by the next one. */
const supervisedActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '3650 days',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  cancellationType: ActivityCancellationType.TRY_CANCEL,
  retry: { initialInterval: '500ms', maximumInterval: '10s', nonRetryableErrorTypes: [FailureType.UnknownBackend] },
});
