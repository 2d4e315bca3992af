import { condition } from '@temporalio/workflow';
import { addressesReadySignal, mayStartSignal, unlockGroupSignal, type AddressBook } from './messages';
import { setStatus, type Outcome, type Run } from './run-context';
import { endedEarly, maxDurationExceeded, stopCriteriaMet } from './run-outcomes';
import type { Submission } from './run-groups';
import { handoverDue } from './run-handover';
import { recordLaunch } from './run-metrics';
import { healFailures, restartDependents, startNewAttempts } from './run-healing';
import { bookToStartWith, currentPeers, noteBookSent, publishPeers } from './run-peers';
import { dependencyWaits, jobsAllowedToStart, usesDependencies } from './startup-order';

/**
 * Up to this much in all (the book's size times the groups), the book goes to the groups with
 * `addressesReady`: their first jobs then start without a query to the run, which waits for the
 * run's workflow task in flight. Past it, the run's history would grow as nodes × groups.
 */
const ADDRESS_BOOK_INLINE_MAX_BYTES = 64 * 1024;

export function unlockOtherGroups(submission: Submission): Promise<unknown> {
  return Promise.all(submission.children.slice(1).map((child) => child.signal(unlockGroupSignal)));
}

/**
 * One signal per group: the book is ready (in it when small, else to read from this run), and
 * which of the group's jobs may start now. Awaited with the next signals, in the startup loop.
 */
export function announceAddresses(run: Run, submission: Submission, addresses: AddressBook): void {
  const { state } = run;
  const peers = currentPeers(run);
  const book: AddressBook = { ...addresses, peers };
  run.announced = book;
  noteBookSent(run, state.jobs, peers);
  const first = jobsAllowedToStart(run.input.plan, state.jobs);
  first.forEach((n) => submission.signalled.add(n));
  const inline = JSON.stringify(book).length * submission.children.length <= ADDRESS_BOOK_INLINE_MAX_BYTES ? { book } : {};
  submission.delivered = Promise.all(
    submission.children.map((child, g) =>
      child.signal(addressesReadySignal, { job_nums: first.filter((n) => state.jobs[n]?.group_index === g), ...inline }),
    ),
  );
}

/** Start-up in the order asked, then watch until the stop criteria hold (or something ends the run). */
export async function startInOrderAndWatch(run: Run, submission: Submission): Promise<Outcome> {
  const { plan } = run.input;
  const { state } = run;
  for (;;) {
    // Events that arrive while signals are being delivered wake the loop again: a job that started
    // and ended meanwhile must not leave the next ones unstarted.
    const seen = run.version;
    if (usesDependencies(plan)) {
      dependencyWaits(plan, state.jobs).forEach((waiting, g) => {
        const group = state.groups[g];
        if (group) group.waiting_for = waiting;
      });
    }
    await letAllowedJobsStart(run, submission);
    if (run.live) {
      // Healing and live peers: failed nodes replaced (or the budget's end), new attempts let start, books sent.
      const exhausted = healFailures(run, submission);
      if (exhausted) return exhausted;
      restartDependents(run, submission);
      await startNewAttempts(run, submission);
      publishPeers(run);
    }
    if (submission.runningSinceMs === null && state.jobs.some((job) => job.running_at !== null)) {
      submission.runningSinceMs = Date.now();
      setStatus(run, 'RUNNING');
    }
    if (!submission.launchRecorded && state.jobs.every((job) => job.removed || job.running_at !== null)) {
      submission.launchRecorded = true;
      recordLaunch({ generation: run.generation, submission: state.submission, backend: run.input.backend });
    }
    const outcome = endedEarly(run, submission) ?? stopCriteriaMet(run);
    if (outcome) return outcome;
    const maxDurationLeft =
      plan.max_duration_s !== null && submission.runningSinceMs !== null ? submission.runningSinceMs + plan.max_duration_s * 1000 - Date.now() : null;
    if (maxDurationLeft !== null && maxDurationLeft <= 0) return maxDurationExceeded(run);
    if (handoverDue(run, submission)) return { kind: 'handover' };
    await condition(
      () => run.version !== seen || endedEarly(run, submission) !== null || handoverDue(run, submission),
      maxDurationLeft !== null ? Math.max(1, maxDurationLeft) : undefined,
    );
  }
}

/** `mayStart` to each group for its jobs that the start-up order now allows. */
async function letAllowedJobsStart(run: Run, submission: Submission): Promise<void> {
  const { state } = run;
  const allowed = jobsAllowedToStart(run.input.plan, state.jobs).filter((n) => !submission.signalled.has(n));
  if (allowed.length > 0) {
    allowed.forEach((n) => submission.signalled.add(n));
    // A live run's nodes start with the book as it is now (the one announced may be old by then).
    const book = run.live ? bookToStartWith(run, allowed.flatMap((n) => state.jobs[n] ?? [])) : undefined;
    await Promise.all([
      submission.delivered,
      ...submission.children.map((child, g) => {
        const jobNums = allowed.filter((n) => state.jobs[n]?.group_index === g);
        return jobNums.length > 0 ? child.signal(mayStartSignal, { job_nums: jobNums, ...(book ? { book } : {}) }) : undefined;
      }),
    ]);
  } else if (submission.delivered) {
    await submission.delivered;
  }
  submission.delivered = null;
}
