import { setHandler } from '@temporalio/workflow';
import { addressBookOf, applyJobEvent } from './job-transitions';
import { jobEventsSignal, type AddressBook, runAddressBookQuery, runJobsQuery, runStateQuery, stopRunSignal } from './messages';
import type { Run } from './run-context';
import { answerOf, jobsPage } from './run-state';

/** The book a node starting now gets: as announced, or (a live run) as it is now, with the last peers version made. */
function bookNow(run: Run): AddressBook | null {
  if (!run.live) return run.announced;
  const book = addressBookOf(run.state);
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
      applyJobEvent(run.state, event);
      if (event.kind === 'failed') run.failureEvents.set(event.job_num, event.retry_event);
    }
    run.version += 1;
  });
}
