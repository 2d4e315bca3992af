import { setHandler } from '@temporalio/workflow';
import { addressBookOf } from '../../src/run-core/jobs';
import { jobEventsSignal, type AddressBook, runAddressBookQuery, runJobsQuery, runStateQuery, stopRunSignal } from '../../src/contract/messages';
import type { Run } from './run-context';
import { answerOf, jobsPage } from '../../src/contract/run-state';

/** The book a node starting now gets: as announced, or (a live run) as it is now, with the last peers version made. */
function bookNow(run: Run): AddressBook | null {
  if (!run.live) return run.announced;
  const book = run.announced ? addressBookOf(run.state, { partial: true }) : null;
  const peers = run.core.live?.peers.book;
  return book && peers ? { ...book, peers } : book;
}

/** The run's queries answer from its state; its signals queue an event for the run's loop (run-loop.ts), nothing more. */
export function setRunHandlers(run: Run): void {
  setHandler(runStateQuery, () => answerOf(run.state));
  setHandler(runJobsQuery, ({ offset, limit }) => jobsPage(run.state, offset, limit));
  setHandler(runAddressBookQuery, ({ submission }) => (submission === run.state.submission ? bookNow(run) : null));
  setHandler(stopRunSignal, ({ abort }) => {
    run.inbox.push({ kind: 'stop', abort });
  });
  setHandler(jobEventsSignal, ({ submission, events }) => {
    run.inbox.push({ kind: 'jobs', submission, events });
  });
}
