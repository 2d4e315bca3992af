import { ApplicationFailure, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { RunEvent } from '../../src/run-core/events';
import type { BackendCapabilities } from '../../src/backends/backend';
import { newRunCore, type RunCore } from '../../src/run-core/state';
import { HANDING_OVER, type AddressBook, type RunInput } from '../../src/contract/messages';
import type { RunState, RunStatus } from '../../src/contract/run-state';
import { newLiveRun, type LiveRun } from './run-live';
import type { Submission } from './submission';
import { metricsOfRun } from './run-metrics';

export type { Ending, Outcome } from '../../src/run-core/ending';

/**
 * One run: its core state (src/run-core: what the policies decide over, the state queries answer
 * in it), the events its handlers queued for the loop, and what the shell keeps to act on it.
 * Only the loop (run-loop.ts) replaces `core`; the handlers (run-handlers.ts) only queue events.
 */
export interface Run {
  input: RunInput;
  core: RunCore;
  /** The run's state as queries answer it: `core.run`. */
  readonly state: RunState;
  /** Events queued by the handlers, oldest first, for the loop. */
  inbox: RunEvent[];
  /** What the run's backend can do (asked once, at the run's start; carried across hand-overs). */
  capabilities: BackendCapabilities;
  /** Bumped when a step outside the core changes the jobs: the loop looks again. */
  version: number;
  /** Healing, resizing and live peers (null: the run uses none of them). */
  live: LiveRun | null;
  /** The submission under way (its group children), for the handlers that act on it. */
  submissionNow: Submission | null;
  /** The address book as the submission's first jobs got it (what `runAddressBook` answers in a run that is not live). */
  announced: AddressBook | null;
  /** Resizes asked of this execution so far: the next one's id. */
  resizesAsked: number;
  /** Executions before this one (continue-as-new): part of the group children's ids. */
  generation: number;
  /** This execution is handing its groups over to the next, or taking them over from the one before: resizes wait. */
  handingOver: boolean;
  /** The history's length when this execution began. */
  historyAtStart: number;
  /** The plan and state are too large for the next execution's input: no hand-over. */
  tooLargeToHandOver: boolean;
  /** Deployments asked of this execution so far: the next one's id. */
  deploysAsked: number;
  /** Settles once every routing-table push started so far has been answered (run-routes.ts). */
  routesPushed: Promise<void>;
  /** What the Web UI shows as current details, and the rollout's steps so far (run-details.ts). */
  details: { shown: string; steps: string[]; lastLine: string | null; deployment: number | null };
}

export function newRun(input: RunInput): Run {
  const info = workflowInfo();
  const core = newRunCore({
    plan: input.plan,
    identity: { run_id: info.workflowId, run_uid: info.firstExecutionRunId, backend: input.backend },
    limits: { address_deadline_s: input.options.address_deadline_s, provision_attempt_timeout_s: input.options.provision_attempt_timeout_s },
    retry: input.options.retry === undefined ? input.plan.retry : input.options.retry,
    backoff_s: input.options.retry_backoff_s,
    now: Date.now(),
  });
  return {
    input,
    core,
    get state() {
      return this.core.run;
    },
    inbox: [],
    capabilities: { group_provisioning: false, provisions_on_worker: false },
    version: 0,
    live: core.live ? newLiveRun() : null,
    submissionNow: null,
    announced: null,
    resizesAsked: 0,
    generation: 0,
    handingOver: false,
    historyAtStart: info.historyLength,
    tooLargeToHandOver: false,
    routesPushed: Promise.resolve(),
    deploysAsked: 0,
    details: { shown: '', steps: [], lastLine: null, deployment: null },
  };
}

export function setStatus(run: Run, status: RunStatus): void {
  const changed = run.state.status !== status;
  run.state.status = status;
  announceStatus(run, status, changed);
}

/** The run's status as its search attribute, and (when it changed) in the metrics. */
export function announceStatus(run: Run, status: RunStatus, changed: boolean): void {
  if (changed) metricsOfRun.runStatus(status);
  if (run.input.search_attributes) upsertSearchAttributes({ TroupeRunStatus: [status] });
}

/** A stop was asked: the core has it, or it waits in the inbox for the loop. */
export function stopAsked(run: Run): boolean {
  return run.core.stop_request !== null || run.inbox.some((event) => event.kind === 'stop');
}

/**
 * An Update's validator while the run continues as new: refused as retryable (HANDING_OVER), the
 * request fine, only early — the client asks again and the next execution (or this one, once its
 * groups are back) takes it.
 */
export function refuseWhileHandingOver(run: Run): void {
  if (run.handingOver && !stopAsked(run)) {
    throw ApplicationFailure.retryable(`run ${run.state.run_name} is continuing as new (its history is long); try again in a moment`, HANDING_OVER);
  }
}
