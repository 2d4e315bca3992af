import { condition } from '@temporalio/workflow';
import { addressBookOf } from '../../src/run-core/jobs';
import { nextDeadline } from '../../src/run-core/decide';
import { dependencyWaits, usesDependencies } from '../../src/run-core/startup-order';
import type { Outcome, Run } from './run-context';
import { feed, takeEvents } from './run-events';
import type { Submission } from './run-groups';
import { handoverDue } from './run-handover';
import { showDetails } from './run-details';
import { releaseUnwanted, startNewAttempts } from './run-attempts';
import { recordLaunch } from './run-metrics';
import { announceAddresses, letAllowedJobsStart, unlockOtherGroups } from './run-startup';

/**
 * The one loop of a submission. Each pass: the events the handlers queued go to the run's core
 * (src/run-core), which alone decides the state and how the submission ends; their effects are
 * carried out here; then the start-up steps of the submission's phase — the staged unlock, the
 * address book, start-up in order — and the live run's new attempts. It waits for the next
 * event, a step's change, or the core's next deadline. Returns how the submission ended, or that
 * the run hands over to its next execution.
 */
export async function driveSubmission(run: Run, submission: Submission): Promise<Outcome> {
  for (;;) {
    const seen = run.version;
    takeEvents(run);
    // The core looks again: healing replaces failed nodes, then the outcome judges the submission.
    feed(run, { kind: 'tick' });
    showDetails(run);
    releaseUnwanted(run);
    const { ending, phase } = run.core.submission;
    if (ending) return ending;
    if (phase === 'unlocking') {
      // Staged unlock: job 0's attempt (its group's batch with group provisioning) comes first; a service scaled to zero has none.
      const first = run.state.jobs[0];
      if (first === undefined || first.instance != null) {
        await unlockOtherGroups(run, submission);
        feed(run, { kind: 'unlocked' });
        continue;
      }
    } else if (phase === 'addressing') {
      // Addresses: every job has one before anything starts (the core fails the jobs without one past its deadline).
      const book = addressBookOf(run.state);
      if (book) {
        announceAddresses(run, submission, book);
        feed(run, { kind: 'announced' });
        continue;
      }
    } else {
      await startInOrder(run, submission);
      if (handoverDue(run, submission)) return { kind: 'handover' };
    }
    const due = nextDeadline(run.core);
    await condition(
      () => run.inbox.length > 0 || run.version !== seen || (phase === 'started' && handoverDue(run, submission)),
      due === null ? undefined : Math.max(1, due - Date.now()),
    );
  }
}

/** Start-up in the order asked, and a live run's new attempts. */
async function startInOrder(run: Run, submission: Submission): Promise<void> {
  const { plan } = run.input;
  const { state } = run;
  if (usesDependencies(plan)) {
    dependencyWaits(plan, state.jobs).forEach((waiting, g) => {
      const group = state.groups[g];
      if (group) group.waiting_for = waiting;
    });
  }
  await letAllowedJobsStart(run, submission);
  if (run.live) {
    await startNewAttempts(run, submission);
  }
  if (!submission.launchRecorded && state.jobs.every((job) => job.removed || job.running_at !== null)) {
    submission.launchRecorded = true;
    recordLaunch({ generation: run.generation, submission: state.submission, backend: run.input.backend });
  }
}
