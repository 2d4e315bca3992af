import {
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowCancellationType,
  ParentClosePolicy,
  allHandlersFinished,
  condition,
  isCancellation,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  sleep,
  startChild,
  upsertSearchAttributes,
  workflowInfo,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import type { TroupeActivities } from '../activities';
import type { JobRef } from '../src/backends/backend';
import type { RetryEvent, RetryPolicy } from '../src/plan/plan-schema';
import { rootMessage } from './failures';
import { nodeGroupWorkflowId } from './ids';
import {
  addressesReadySignal,
  clusterReadySignal,
  jobEventsSignal,
  mayStartSignal,
  runAddressBookQuery,
  runJobsQuery,
  runStateQuery,
  stopRunSignal,
  unlockGroupSignal,
  type AddressBook,
  type JobEvent,
  type RunInput,
  type RunInputArg,
} from './messages';
import { NodeGroupWorkflow, type NodeGroupInput } from './node-group-workflow';
import { answerOf, jobsPage, type JobState, type JobTerminationReason, type RunState, type RunStatus, type RunTerminationReason } from './run-state';
import { dependencyWaits, isJobReady, jobsAllowedToStart, usesDependencies } from './startup-order';

/** How a submission ended, before teardown. */
type Outcome =
  | { kind: 'done' }
  | { kind: 'failed'; job_num: number | null; retry_event: RetryEvent | null; message: string }
  | { kind: 'stopped'; abort: boolean };

const { describeBackend } = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 5 },
});
/** A local activity: answered by the worker that runs the workflow task, without a round trip. */
const describeBackendHere = proxyLocalActivities<TroupeActivities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 5 },
}).describeBackend;

/** Patches: runs begun before them replay the older sequence (see test/workflow/replay.test.ts). */
const DESCRIBE_BACKEND_LOCALLY = 'describe-backend-locally';
const START_WITH_ADDRESSES = 'may-start-with-addresses';
const EVENTS_CLOSED_AT_TEARDOWN = 'events-closed-at-teardown';
const EVENTS_DURING_SENDS_WAKE = 'events-during-sends-wake';
const DESCRIBE_ONLY_FOR_MULTI_NODE_GROUPS = 'describe-only-for-multi-node-groups';
const ADDRESSES_BY_QUERY = 'addresses-by-query';

/** Teardown must finish: retried with back-off for a long while, never cancelled. */
const teardownActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '5m',
  scheduleToCloseTimeout: '30m',
  heartbeatTimeout: '30s',
  retry: { initialInterval: '1s', maximumInterval: '30s' },
});

/**
 * One run of a task over heterogeneous node groups: a child per group, the staged unlock, the
 * address exchange, start-up in the order the task asks, watching, and a teardown that always
 * runs. Resubmits the whole run while `retry` allows.
 */
export async function RunWorkflow(arg: RunInputArg): Promise<RunState> {
  const input = await parseInput(arg);
  const { plan } = input;
  const state = initialState(input);
  const retry = effectiveRetry(input);
  const startedAtMs = Date.now();
  const retryDeadlineMs = retry ? startedAtMs + retry.duration_s * 1000 : null;
  let stopRequest: { abort: boolean } | null = null;
  let groupProvisioning = false;
  /** Bumped on every job event: what the main loop waits on. */
  let version = 0;
  /** The retry event each failed job counts as (exits with an error count as `error`). */
  const failureEvents = new Map<number, RetryEvent | null>();
  /** Groups that another group waits for: one of their jobs ending before it is ready fails the run. */
  const dependedOn = new Set(plan.groups.flatMap((g) => g.depends_on ?? []));

  setHandler(runStateQuery, () => answerOf(state));
  setHandler(runJobsQuery, ({ offset, limit }) => jobsPage(state, offset, limit));
  setHandler(runAddressBookQuery, ({ submission }) => (submission === state.submission ? addressBookOf(state) : null));
  setHandler(stopRunSignal, ({ abort }) => {
    stopRequest = { abort: abort || stopRequest?.abort === true };
  });
  /** The submission whose outcome is decided: what its jobs do from then on is teardown's. */
  let eventsClosedFor: number | null = null;
  setHandler(jobEventsSignal, ({ submission, events }) => {
    if (submission !== state.submission || submission === eventsClosedFor) return;
    for (const event of events) {
      applyJobEvent(state, event);
      if (event.kind === 'failed') failureEvents.set(event.job_num, event.retry_event);
    }
    version += 1;
  });
  const setStatus = (status: RunStatus) => {
    state.status = status;
    if (input.search_attributes) upsertSearchAttributes({ TroupeRunStatus: [status] });
  };

  try {
    // Whether the backend provisions a group in one call only matters to groups of several nodes.
    const describeNeeded = !(plan.groups.every((g) => g.nodes === 1) && patched(DESCRIBE_ONLY_FOR_MULTI_NODE_GROUPS));
    if (describeNeeded) {
      const describe = patched(DESCRIBE_BACKEND_LOCALLY) ? describeBackendHere : describeBackend;
      groupProvisioning = (await describe({ backend: input.backend })).group_provisioning;
    }
    let backoffS = input.options.retry_backoff_s;
    for (;;) {
      const outcome = await runSubmission();
      await CancellationScope.nonCancellable(() => teardown(outcome));
      if (outcome.kind === 'failed' && mayRetry(outcome)) {
        await sleep(backoffS * 1000);
        backoffS = Math.min(backoffS * 2, 300);
        resubmit(state);
        failureEvents.clear();
        continue;
      }
      finish(outcome);
      break;
    }
  } catch (err) {
    if (!isCancellation(err)) throw err;
    // Cancelled from outside (the Web UI, `temporal workflow cancel`): an abort that still tears down.
    await CancellationScope.nonCancellable(async () => {
      await teardown({ kind: 'stopped', abort: true });
      finish({ kind: 'stopped', abort: true });
    });
  }
  await condition(allHandlersFinished);
  return answerOf(state);

  function mayRetry(outcome: Extract<Outcome, { kind: 'failed' }>): boolean {
    if (!retry || !outcome.retry_event || !retry.on_events.includes(outcome.retry_event)) return false;
    if (retryDeadlineMs !== null && Date.now() >= retryDeadlineMs) {
      state.termination_reason = 'RETRY_LIMIT_EXCEEDED';
      return false;
    }
    return true;
  }

  async function runSubmission(): Promise<Outcome> {
    setStatus('PROVISIONING');
    const scope = new CancellationScope();
    const children = await scope.run(() => Promise.all(plan.groups.map((group) => startGroup(group.index))));
    let childFailure: string | null = null;
    const childResults = children.map((child, i) =>
      child.result().catch((err: unknown) => {
        if (!isCancellation(err)) childFailure ??= `group ${plan.groups[i]?.name}: ${rootMessage(err)}`;
      }),
    );
    const ended = (): Outcome | null => {
      if (stopRequest) return { kind: 'stopped', abort: stopRequest.abort };
      const failed = state.jobs.find((job) => job.status === 'FAILED');
      if (failed) {
        const retryEvent = failureEvents.has(failed.job_num) ? (failureEvents.get(failed.job_num) ?? null) : 'error';
        return { kind: 'failed', job_num: failed.job_num, retry_event: retryEvent, message: describeJob(failed) };
      }
      if (childFailure) return { kind: 'failed', job_num: null, retry_event: null, message: childFailure };
      const endedUnready = state.jobs.find((job) => dependedOn.has(job.group_index) && job.finished_at !== null && !isJobReady(plan, job));
      if (endedUnready) {
        const label = `${endedUnready.group_name}/${endedUnready.group_job_index}`;
        return { kind: 'failed', job_num: endedUnready.job_num, retry_event: 'error', message: `${label} exited before it was ready` };
      }
      return null;
    };
    try {
      // Staged unlock: job 0's attempt (group 0's batch with group provisioning) comes first.
      await condition(() => ended() !== null || state.jobs[0]?.instance != null);
      const early = ended();
      if (early) return early;
      await Promise.all(children.slice(1).map((child) => child.signal(unlockGroupSignal)));

      // Addresses: every job must have one before anything starts, within a deadline.
      const haveAll = await condition(
        () => ended() !== null || state.jobs.every((job) => job.instance !== null),
        addressDeadlineMs(),
      );
      const afterAddresses = ended();
      if (afterAddresses) return afterAddresses;
      const book = addressBookOf(state);
      if (!haveAll || !book) return addressesTimedOut();
      const signalled = new Set<number>();
      let delivered: Promise<unknown> | null;
      if (patched(ADDRESSES_BY_QUERY)) {
        // One signal per group: the book is ready (in it when small, else to read from this run), and
        // which of the group's jobs may start now.
        const first = jobsAllowedToStart(plan, state.jobs);
        first.forEach((n) => signalled.add(n));
        const inline = JSON.stringify(book).length * children.length <= ADDRESS_BOOK_INLINE_MAX_BYTES ? { book } : {};
        delivered = Promise.all(
          children.map((child, g) => child.signal(addressesReadySignal, { job_nums: first.filter((n) => state.jobs[n]?.group_index === g), ...inline })),
        );
      } else {
        // The first jobs' mayStart goes out in the same workflow task as the address book.
        delivered = deliverAddressBook(children, book);
        if (!patched(START_WITH_ADDRESSES)) {
          await delivered;
          delivered = null;
        }
      }

      // Start-up in the order asked, then watch until the stop criteria hold.
      let runningSinceMs: number | null = null;
      // Job events that arrive while the mayStart signals are being delivered must wake the loop
      // again (else a job that started and ended meanwhile would leave the next ones unstarted).
      const wakeOnEventsDuringSends = patched(EVENTS_DURING_SENDS_WAKE);
      for (;;) {
        const seen = version;
        if (usesDependencies(plan)) {
          dependencyWaits(plan, state.jobs).forEach((waiting, g) => {
            const group = state.groups[g];
            if (group) group.waiting_for = waiting;
          });
        }
        const allowed = jobsAllowedToStart(plan, state.jobs).filter((n) => !signalled.has(n));
        if (allowed.length > 0) {
          allowed.forEach((n) => signalled.add(n));
          await Promise.all([
            delivered,
            ...children.map((child, g) => {
              const jobNums = allowed.filter((n) => state.jobs[n]?.group_index === g);
              return jobNums.length > 0 ? child.signal(mayStartSignal, { job_nums: jobNums }) : undefined;
            }),
          ]);
        } else if (delivered) {
          await delivered;
        }
        delivered = null;
        if (runningSinceMs === null && state.jobs.some((job) => job.running_at !== null)) {
          runningSinceMs = Date.now();
          setStatus('RUNNING');
        }
        const outcome = ended() ?? stopCriteriaMet();
        if (outcome) return outcome;
        const maxDurationLeft =
          plan.max_duration_s !== null && runningSinceMs !== null ? runningSinceMs + plan.max_duration_s * 1000 - Date.now() : null;
        if (maxDurationLeft !== null && maxDurationLeft <= 0) return maxDurationExceeded();
        const before = wakeOnEventsDuringSends ? seen : version;
        await condition(
          () => version !== before || ended() !== null,
          maxDurationLeft !== null ? Math.max(1, maxDurationLeft) : undefined,
        );
      }
    } finally {
      state.status = 'TERMINATING';
      // Batch activities report to the run directly and learn of the cancellation late: the
      // exits that teardown itself causes must not count as the jobs' own.
      if (patched(EVENTS_CLOSED_AT_TEARDOWN)) eventsClosedFor = state.submission;
      scope.cancel();
      await Promise.all(childResults);
    }
  }

  function startGroup(index: number): Promise<ChildWorkflowHandle<typeof NodeGroupWorkflow>> {
    const group = plan.groups[index];
    if (!group) throw new Error(`no group ${index}`);
    const childInput: NodeGroupInput = {
      run_workflow_id: state.run_id,
      run_uid: state.run_uid,
      submission: state.submission,
      backend: input.backend,
      group_provisioning: groupProvisioning,
      group,
      jobs: plan.jobs.filter((job) => job.node_group_index === index),
      run: {
        run_name: plan.run_name,
        nodes_num: plan.nodes_num,
        env: plan.env,
        image: plan.image,
        working_dir: plan.working_dir,
        fleets: plan.fleets,
      },
      group_sizes: plan.groups.map((g) => g.nodes),
      options: input.options,
      retry,
      retry_deadline_ms: retryDeadlineMs,
      unlocked: index === 0,
    };
    return startChild(NodeGroupWorkflow, {
      workflowId: nodeGroupWorkflowId(state.run_id, group.name, state.submission),
      args: [childInput],
      cancellationType: ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
      staticSummary: `group ${group.name}: ${group.nodes} node${group.nodes === 1 ? '' : 's'}, jobs ${childInput.jobs[0]?.job_num ?? ''}-${childInput.jobs.at(-1)?.job_num ?? ''}`,
      parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
    });
  }

  function stopCriteriaMet(): Outcome | null {
    const master = state.jobs[0];
    if (plan.stop_criteria === 'master-done' && master?.exit_code === 0) return { kind: 'done' };
    if (state.jobs.every((job) => job.exit_code === 0)) return { kind: 'done' };
    return null;
  }

  function addressDeadlineMs(): number {
    // While no capacity is being retried, the deadline stretches to the end of the retry duration.
    const retryLeftMs = retry?.on_events.includes('no-capacity') && retryDeadlineMs !== null ? retryDeadlineMs - Date.now() : 0;
    return Math.max(input.options.address_deadline_s * 1000, retryLeftMs + input.options.provision_attempt_timeout_s * 1000);
  }

  function addressesTimedOut(): Outcome {
    const missing = state.jobs.filter((job) => job.instance === null);
    const seconds = Math.round(addressDeadlineMs() / 1000);
    for (const job of missing) {
      endJob(job, 'FAILED', 'WAITING_ADDRESSES_LIMIT_EXCEEDED', `no address after ${seconds}s`);
    }
    const names = missing.map((job) => `${job.group_name}/${job.group_job_index} (job ${job.job_num})`).join(', ');
    return { kind: 'failed', job_num: missing[0]?.job_num ?? null, retry_event: 'error', message: `no address after ${seconds}s for ${names}` };
  }

  function maxDurationExceeded(): Outcome {
    const message = `max_duration of ${plan.max_duration_s}s exceeded`;
    for (const job of state.jobs) {
      if (!isJobFinished(job)) endJob(job, 'TERMINATED', 'MAX_DURATION_EXCEEDED', message);
    }
    return { kind: 'failed', job_num: null, retry_event: null, message };
  }

  async function teardown(outcome: Outcome): Promise<void> {
    state.status = 'TERMINATING';
    const [status, reason]: [JobState['status'], JobTerminationReason] =
      outcome.kind === 'stopped'
        ? outcome.abort ? ['ABORTED', 'ABORTED_BY_USER'] : ['TERMINATED', 'TERMINATED_BY_USER']
        : ['TERMINATED', 'TERMINATED_BY_SERVER'];
    const toStop: JobRef[] = state.jobs.flatMap((job) =>
      job.instance && job.exit_code === null
        ? [{ run_id: state.run_uid, run_name: plan.run_name, submission: state.submission, job_num: job.job_num, job_name: job.job_name, instance: job.instance }]
        : [],
    );
    const grace = outcome.kind === 'stopped' && outcome.abort ? 0 : input.options.stop_grace_s;
    try {
      if (toStop.length > 0) await teardownActivities.stopJobs({ backend: input.backend, jobs: toStop, grace_s: grace });
      await teardownActivities.releaseRun({ backend: input.backend, run_id: state.run_uid, submission: state.submission });
    } catch (err) {
      state.message = `${state.message ? `${state.message}; ` : ''}teardown incomplete: ${rootMessage(err)}`;
    }
    for (const job of state.jobs) {
      if (!isJobFinished(job)) endJob(job, status, reason, null);
    }
  }

  function finish(outcome: Outcome): void {
    state.finished_at = new Date().toISOString();
    let reason: RunTerminationReason;
    if (outcome.kind === 'done') {
      reason = 'ALL_JOBS_DONE';
    } else if (outcome.kind === 'stopped') {
      reason = outcome.abort ? 'ABORTED_BY_USER' : 'STOPPED_BY_USER';
    } else {
      reason = state.termination_reason === 'RETRY_LIMIT_EXCEEDED' ? 'RETRY_LIMIT_EXCEEDED' : 'JOB_FAILED';
      state.message = state.message ? `${outcome.message}; ${state.message}` : outcome.message;
    }
    state.termination_reason = reason;
    setStatus(outcome.kind === 'done' ? 'DONE' : outcome.kind === 'stopped' ? 'TERMINATED' : 'FAILED');
  }
}

/** The submission's address book, once every job has an address (null before). */
function addressBookOf(state: RunState): AddressBook | null {
  if (!state.jobs.every((job) => job.instance !== null)) return null;
  return {
    job_ips: state.jobs.map((job) => job.instance?.internal_ip ?? ''),
    gpus_per_node: state.jobs.map((job) => job.instance?.gpus ?? 0),
  };
}

/**
 * Up to this much in all (the book's size times the groups), the book goes to the groups with
 * `addressesReady`: their first jobs then start without a query to the run, which waits for the
 * run's workflow task in flight. Past it, the run's history would grow as nodes × groups.
 */
const ADDRESS_BOOK_INLINE_MAX_BYTES = 64 * 1024;

/**
 * The book to every group. Each signal carries all of it, so many big groups would make one
 * workflow task larger than gRPC's 4 MB, and the server terminates a workflow whose task is; past
 * that size the signals go out in several tasks (smaller runs send them all in one, as always).
 */
const ADDRESS_BOOK_BYTES_PER_TASK = 3.5 * 1024 * 1024;
function deliverAddressBook(children: ChildWorkflowHandle<typeof NodeGroupWorkflow>[], book: AddressBook): Promise<unknown> {
  const perTask = Math.max(1, Math.floor(ADDRESS_BOOK_BYTES_PER_TASK / (JSON.stringify(book).length + 256)));
  const send = (some: typeof children) => Promise.all(some.map((child) => child.signal(clusterReadySignal, book)));
  if (perTask >= children.length) return send(children);
  return (async () => {
    for (let i = 0; i < children.length; i += perTask) await send(children.slice(i, i + perTask));
  })();
}

/**
 * The input, checked and with its defaults. The schemas are loaded here rather than with the
 * module: every new workflow of the worker (a run's groups too) evaluates the workflow modules
 * again, and zod's are most of that time (bench/launch-latency.ts). `eager` keeps the module in
 * the one bundle: the load is a microtask, the same on every replay.
 */
async function parseInput(arg: RunInputArg): Promise<RunInput> {
  const { RunInputSchema } = await import(/* webpackMode: "eager" */ './message-schemas');
  const parsed = RunInputSchema.safeParse(arg);
  if (!parsed.success) {
    // A plain error would fail the workflow task forever; a bad input is the caller's to fix.
    throw ApplicationFailure.nonRetryable(`invalid run input: ${parsed.error.message}`, 'InvalidRunInput');
  }
  return parsed.data;
}

function effectiveRetry(input: RunInput): RetryPolicy | null {
  return input.options.retry === undefined ? input.plan.retry : input.options.retry;
}

function initialState(input: RunInput): RunState {
  const now = new Date().toISOString();
  const info = workflowInfo();
  return {
    run_name: input.plan.run_name,
    run_id: info.workflowId,
    run_uid: info.firstExecutionRunId,
    backend: input.backend,
    status: 'SUBMITTED',
    termination_reason: null,
    message: null,
    submission: 0,
    submitted_at: now,
    finished_at: null,
    groups: input.plan.groups.map((g) => ({ index: g.index, name: g.name, nodes: g.nodes, waiting_for: null })),
    jobs: input.plan.jobs.map((job) => freshJob(job.job_num, job.job_name, job.node_group_index, job.node_group_name, job.node_group_job_index, now)),
    jobs_paged: false,
  };
}

function freshJob(job_num: number, job_name: string, group_index: number, group_name: string, group_job_index: number, now: string): JobState {
  return {
    job_num, job_name, group_index, group_name, group_job_index,
    status: 'PROVISIONING', termination_reason: null, message: null, instance: null, pid: null, exit_code: null,
    submitted_at: now, provisioned_at: null, running_at: null, ready_at: null, finished_at: null,
  };
}

function resubmit(state: RunState): void {
  const now = new Date().toISOString();
  state.submission += 1;
  state.jobs = state.jobs.map((job) => freshJob(job.job_num, job.job_name, job.group_index, job.group_name, job.group_job_index, now));
}

function isJobFinished(job: JobState): boolean {
  return ['TERMINATED', 'ABORTED', 'FAILED', 'DONE'].includes(job.status);
}

function endJob(job: JobState, status: JobState['status'], reason: JobTerminationReason, message: string | null): void {
  job.status = status;
  job.termination_reason = reason;
  job.message = message;
  job.finished_at = new Date().toISOString();
}

function applyJobEvent(state: RunState, event: JobEvent): void {
  const job = state.jobs[event.job_num];
  if (!job || isJobFinished(job)) return;
  const now = new Date().toISOString();
  switch (event.kind) {
    case 'provisioned':
      job.instance = event.instance;
      job.provisioned_at = now;
      job.status = 'PULLING';
      break;
    case 'running':
      // A batch retried after a worker crash reports its jobs again: the first report stands.
      if (job.running_at !== null) break;
      job.pid = event.pid;
      job.running_at = now;
      job.status = 'RUNNING';
      break;
    case 'ready':
      if (job.ready_at !== null) break;
      job.ready_at = now;
      job.status = 'READY';
      break;
    case 'exited':
      job.exit_code = event.exit_code;
      if (event.exit_code === 0) endJob(job, 'DONE', 'DONE_BY_RUNNER', null);
      else endJob(job, 'FAILED', 'CONTAINER_EXITED_WITH_ERROR', `exited with code ${event.exit_code}`);
      break;
    case 'failed':
      endJob(job, 'FAILED', event.reason, event.message);
      break;
  }
}

function describeJob(job: JobState): string {
  const where = job.instance ? ` on ${job.instance.host}` : '';
  return `job ${job.job_num} (${job.group_name}/${job.group_job_index})${where} failed: ${job.termination_reason}${job.message ? `: ${job.message}` : ''}`;
}
