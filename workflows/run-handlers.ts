import { setHandler } from '@temporalio/workflow';
import { addressBookOf, applyJobEvent } from './job-transitions';
import { jobEventsSignal, runAddressBookQuery, runJobsQuery, runStateQuery, stopRunSignal } from './messages';
import type { Run } from './run-context';
import { answerOf, jobsPage } from './run-state';

/** The run's queries and signals: they answer from the run's state or record into it, nothing more. */
export function setRunHandlers(run: Run): void {
  setHandler(runStateQuery, () => answerOf(run.state));
  setHandler(runJobsQuery, ({ offset, limit }) => jobsPage(run.state, offset, limit));
  setHandler(runAddressBookQuery, ({ submission }) => (submission === run.state.submission ? addressBookOf(run.state) : null));
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
