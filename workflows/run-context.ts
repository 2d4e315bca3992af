import { upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { RetryEvent, RetryPolicy } from '../src/plan/plan-schema';
import type { AddressBook, RunInput } from './messages';
import { initialState } from './job-transitions';
import type { RunState, RunStatus } from './run-state';
import { isLivePlan, newLiveRun, type LiveRun } from './run-live';
import type { Submission } from './submission';
import { metricsOfRun } from './run-metrics';

export type { Ending, Outcome } from './outcome';

/**
 * One run as plain data: its state (what queries answer) and what its handlers learnt. The run's
 * steps read and change it; the handlers (run-handlers.ts) only record into it.
 */
export interface Run {
  input: RunInput;
  state: RunState;
  retry: RetryPolicy | null;
  /** Epoch ms when `retry.duration` runs out (null: no retry). */
  retryDeadlineMs: number | null;
  stopRequest: { abort: boolean } | null;
  /** The backend provisions a group's batch in one call. */
  groupProvisioning: boolean;
  /** Bumped on every job event: what the main loop waits on. */
  version: number;
  /** The retry event each failed job counts as (exits with an error count as `error`). */
  failureEvents: Map<number, RetryEvent | null>;
  /** The submission whose outcome is decided: what its jobs do from then on is teardown's. */
  eventsClosedFor: number | null;
  /** Groups that another group waits for: one of their jobs ending before it is ready fails the run. */
  dependedOn: Set<number>;
  /** Healing, resizing and live peers (null: the run uses none of them). */
  live: LiveRun | null;
  /** The submission under way (its group children), for the handlers that act on it. */
  submissionNow: Submission | null;
  /** The address book as the submission's first jobs got it (what `runAddressBook` answers in a run that is not live). */
  announced: AddressBook | null;
  /** The next back-off before a resubmission (doubles each time). */
  backoffS: number;
  /** Executions before this one (continue-as-new): part of the group children's ids. */
  generation: number;
  /** This execution is handing its groups over to the next, or taking them over from the one before: resizes wait. */
  handingOver: boolean;
  /** The history's length when this execution began. */
  historyAtStart: number;
  /** The plan and state are too large for the next execution's input: no hand-over. */
  tooLargeToHandOver: boolean;
}

export function newRun(input: RunInput): Run {
  const retry = input.options.retry === undefined ? input.plan.retry : input.options.retry;
  return {
    input,
    state: initialState(input),
    retry,
    retryDeadlineMs: retry ? Date.now() + retry.duration_s * 1000 : null,
    stopRequest: null,
    groupProvisioning: false,
    version: 0,
    failureEvents: new Map(),
    eventsClosedFor: null,
    dependedOn: new Set(input.plan.groups.flatMap((g) => g.depends_on ?? [])),
    live: isLivePlan(input.plan) ? newLiveRun(input.plan) : null,
    submissionNow: null,
    announced: null,
    backoffS: input.options.retry_backoff_s,
    generation: 0,
    handingOver: false,
    historyAtStart: workflowInfo().historyLength,
    tooLargeToHandOver: false,
  };
}

export function setStatus(run: Run, status: RunStatus): void {
  if (run.state.status !== status) metricsOfRun.runStatus(status);
  run.state.status = status;
  if (run.input.search_attributes) upsertSearchAttributes({ TroupeRunStatus: [status] });
}
