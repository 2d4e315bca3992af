import { setHandler } from '@temporalio/workflow';
import { addressBookOf, applyJobEvent } from './job-transitions';
import { jobEventsSignal, type AddressBook, runAddressBookQuery, runJobsQuery, runStateQuery, stopRunSignal } from './messages';
import type { Run } from './run-context';
import { jobRefOf } from './run-job-refs';
import { answerOf, jobsPage } from './run-state';

/** The book a node starting now gets: as announced, or (a live run) as it is now, with the last peers version made. */
function bookNow(run: Run): AddressBook | null {
  if (!run.live) return run.announced;
  const book = run.announced ? addressBookOf(run.state, { partial: true }) : null;
  const peers = run.live.peers.book;
  return book && peers ? { ...book, peers } : book;
}

/** The run's queries and signals: they answer from the run's state or record into it, nothing more. */
export function setRunHandlers(run: Run): void {
  setHandler(runStateQuery, () => answerOf(run.state));
  setHandler(runJobsQuery, ({ offset, limit }) => jobsPage(run.state, offset, limit));
  setHandler(runAddressBookQuery, ({ submission }) => (submission === run.state.submission ? bookNow(run) : null));
  setHandler(stopRunSignal, ({ abort }) => {
    run.stopRequest = { abort: abort || run.stopRequest?.abort === true };
  });
  setHandler(jobEventsSignal, ({ submission, events }) => {
    if (submission !== run.state.submission || submission === run.eventsClosedFor) return;
    for (const event of events) {
      if (applyJobEvent(run.state, event)) {
        if (event.kind === 'failed') run.failureEvents.set(event.job_num, event.retry_event);
      } else if (event.kind === 'provisioned' && run.live) {
        // A machine provisioned for an attempt that was replaced or removed meanwhile: given back by the run.
        const job = run.state.jobs[event.job_num];
        const ref = job && (job.removed || (event.attempt ?? 0) < job.attempt) ? jobRefOf(run, job, { attempt: event.attempt ?? 0, instance: event.instance }) : null;
        if (ref) run.live.unwanted.push(ref);
      }
    }
    run.version += 1;
  });
}
