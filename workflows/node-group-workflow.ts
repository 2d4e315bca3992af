import {
  ActivityCancellationType,
  CancellationScope,
  condition,
  getExternalWorkflowHandle,
  isCancellation,
  proxyActivities,
  setHandler,
} from '@temporalio/workflow';
import type { TroupeActivities } from '../activities';
import type { Instance, JobRef } from '../src/backends/backend';
import type { GroupPlan, JobPlan, Plan, RetryPolicy } from '../src/plan/plan-schema';
import { FailureType } from './failure-types';
import {
  classifyProvisioningFailure,
  classifyReadyFailure,
  classifyRunnerWaitFailure,
  classifyRunningFailure,
  type ClassifiedFailure,
} from './failures';
import {
  clusterReadySignal,
  jobEventsSignal,
  mayStartSignal,
  unlockGroupSignal,
  type AddressBook,
  type JobEvent,
  type RunOptions,
} from './messages';

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
 * One node group of a run: provisions its master (or its whole batch), then its other jobs, waits
 * for the run's address book, and runs each job when the run says it may start. Everything it
 * learns goes to the run as signals; the run alone decides order, failure and teardown.
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

  const provision = async (jobs: JobPlan[]): Promise<boolean> => {
    try {
      const placed = await provisionActivities(input).provisionJobs.executeWithOptions({ summary: `provision ${labelOf(jobs)}` }, [
        {
          backend: input.backend,
          request: {
            run_id: input.run_uid,
            run_name: input.run.run_name,
            submission: input.submission,
            group: input.group,
            jobs,
            fleets: input.run.fleets,
          },
        },
      ]);
      placed.forEach((instance, i) => {
        const job = jobs[i];
        if (job) instances.set(job.job_num, instance);
      });
      await report(jobs.flatMap((job) => {
        const instance = instances.get(job.job_num);
        return instance ? [{ kind: 'provisioned' as const, job_num: job.job_num, instance }] : [];
      }));
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

  await condition(() => addresses !== null);
  const book = addresses as AddressBook | null;
  if (book === null) return;
  await Promise.all(input.jobs.map((job) => runJob(input, job, instances.get(job.job_num), book, mayStart, report)));
}

async function runJob(
  input: NodeGroupInput,
  job: JobPlan,
  instance: Instance | undefined,
  addresses: AddressBook,
  mayStart: ReadonlySet<number>,
  report: (events: JobEvent[]) => Promise<void>,
): Promise<void> {
  if (!instance) return;
  const ref: JobRef = {
    run_id: input.run_uid,
    run_name: input.run.run_name,
    submission: input.submission,
    job_num: job.job_num,
    job_name: job.job_name,
    instance,
  };
  const fail = (failure: ClassifiedFailure) => report([{ kind: 'failed', job_num: job.job_num, ...failure }]);
  // What the Web UI shows for each activity: "start prefill/0 on 10.213.4.2 (local)".
  const label = `${job.node_group_name}/${job.node_group_job_index}`;
  const where = `${instance.internal_ip} (${instance.host})`;
  try {
    await runnerActivities(input).waitRunnerReady.executeWithOptions({ summary: `wait for the runner of ${label} on ${where}` }, [
      { backend: input.backend, job: ref },
    ]);
  } catch (err) {
    if (isCancellation(err)) throw err;
    await fail(classifyRunnerWaitFailure(err, input.options.runner_ready_timeout_s));
    return;
  }
  await condition(() => mayStart.has(job.job_num));
  try {
    const { pid } = await jobActivities.startJob.executeWithOptions({ summary: `start ${label} on ${where}` }, [
      {
        backend: input.backend,
        job: ref,
        run: input.run,
        run_uid: input.run_uid,
        plan_job: job,
        addresses,
        group_sizes: input.group_sizes,
      },
    ]);
    await report([{ kind: 'running', job_num: job.job_num, pid }]);
    // Readiness is probed while the job is watched; the probing stops when the job ends.
    const readiness = new CancellationScope();
    const probe = input.group.ready;
    const ready = probe
      ? readiness
          .run(() =>
            readyActivities.waitJobReady.executeWithOptions({ summary: `probe ${label} on ${where} until ready` }, [
              {
                backend: input.backend,
                job: ref,
                probe,
                deadline_ms: Date.now() + probe.timeout_s * 1000,
                label,
              },
            ]),
          )
          .then(
            () => report([{ kind: 'ready', job_num: job.job_num }]),
            (err: unknown) => (isCancellation(err) ? undefined : fail(classifyReadyFailure(err))),
          )
      : Promise.resolve();
    try {
      const { exit_code } = await watchActivities.watchJob.executeWithOptions({ summary: `watch ${label} on ${where}` }, [
        { backend: input.backend, job: ref, interval_ms: input.options.watch_interval_ms },
      ]);
      readiness.cancel();
      await ready;
      await report([{ kind: 'exited', job_num: job.job_num, exit_code }]);
    } finally {
      readiness.cancel();
    }
  } catch (err) {
    if (isCancellation(err)) throw err;
    await fail(classifyRunningFailure(err));
  }
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
function provisionActivities(input: NodeGroupInput) {
  const retriesNoCapacity = input.retry?.on_events.includes('no-capacity') === true && input.retry_deadline_ms !== null;
  const remainingMs = retriesNoCapacity ? Math.max(1_000, (input.retry_deadline_ms ?? 0) - Date.now()) : null;
  return proxyActivities<TroupeActivities>({
    startToCloseTimeout: `${input.options.provision_attempt_timeout_s}s`,
    heartbeatTimeout: HEARTBEAT_TIMEOUT,
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
  });
}

function runnerActivities(input: NodeGroupInput) {
  return proxyActivities<TroupeActivities>({
    scheduleToCloseTimeout: `${input.options.runner_ready_timeout_s}s`,
    startToCloseTimeout: '60s',
    heartbeatTimeout: HEARTBEAT_TIMEOUT,
    retry: { initialInterval: '200ms', backoffCoefficient: 1.5, maximumInterval: '5s', nonRetryableErrorTypes: [FailureType.UnknownBackend] },
  });
}

const jobActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '120s',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  retry: { initialInterval: '500ms', maximumAttempts: 10, nonRetryableErrorTypes: [FailureType.UnknownBackend, FailureType.SecretKey, FailureType.SubmissionClosed] },
});

/** The watch lasts as long as the job; a crashed worker's watch is picked up again by the next one. */
const readyActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '3650 days',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  retry: { initialInterval: '500ms', maximumInterval: '5s', nonRetryableErrorTypes: [FailureType.NotReady, FailureType.UnknownBackend] },
});

const watchActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '3650 days',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  cancellationType: ActivityCancellationType.TRY_CANCEL,
  retry: {
    initialInterval: '500ms',
    maximumInterval: '10s',
    nonRetryableErrorTypes: [FailureType.InstanceUnreachable, FailureType.JobVanished, FailureType.UnknownBackend],
  },
});
