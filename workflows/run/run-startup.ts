import { addressesReadySignal, mayStartSignal, unlockGroupSignal, type AddressBook } from '../../src/contract/messages';
import type { Run } from './run-context';
import { firstGroup, type Submission } from './run-groups';
import { booksToStartWith, noteBookSent, peersNow } from '../../src/run-core/peers';
import { jobsAllowedToStart } from '../../src/run-core/startup-order';

/**
 * Up to this much in all (the book's size times the groups), the book goes to the groups with
 * `addressesReady`: their first jobs then start without a query to the run, which waits for the
 * run's workflow task in flight. Past it, the run's history would grow as nodes × groups.
 */
const ADDRESS_BOOK_INLINE_MAX_BYTES = 64 * 1024;

export function unlockOtherGroups(run: Run, submission: Submission): Promise<unknown> {
  const first = firstGroup(run);
  return Promise.all(submission.children.filter((_, g) => g !== first).map((child) => child.signal(unlockGroupSignal)));
}

/**
 * One signal per group: the book is ready (in it when small, else to read from this run), and
 * which of the group's jobs may start now. Awaited with the next signals, in the run's loop.
 */
export function announceAddresses(run: Run, submission: Submission, addresses: AddressBook): void {
  const { state } = run;
  const now = peersNow(run.core);
  const book: AddressBook = { ...addresses, peers: now.book };
  run.announced = book;
  run.core = noteBookSent(now.core, state.jobs, now.book);
  const first = jobsAllowedToStart(run.input.plan, state.jobs);
  first.forEach((n) => submission.signalled.add(n));
  const inline = JSON.stringify(book).length * submission.children.length <= ADDRESS_BOOK_INLINE_MAX_BYTES ? { book } : {};
  submission.delivered = Promise.all(
    submission.children.map((child, g) =>
      child.signal(addressesReadySignal, { job_nums: first.filter((n) => state.jobs[n]?.group_index === g), ...inline }),
    ),
  );
}

/** `mayStart` to each group for its jobs that the start-up order now allows. */
export async function letAllowedJobsStart(run: Run, submission: Submission): Promise<void> {
  const { state } = run;
  const allowed = jobsAllowedToStart(run.input.plan, state.jobs).filter((n) => !submission.signalled.has(n));
  if (allowed.length > 0) {
    allowed.forEach((n) => submission.signalled.add(n));
    // A live run's nodes start with the book as it is now (the one announced may be old by then), each with its view's.
    const jobs = allowed.flatMap((n) => state.jobs[n] ?? []);
    let starts: Array<{ jobs: typeof jobs; book?: AddressBook }> = [{ jobs }];
    if (run.live) {
      const start = booksToStartWith(run.core, jobs);
      run.core = start.core;
      starts = start.starts ?? starts;
    }
    await Promise.all([
      submission.delivered,
      ...starts.flatMap(({ jobs: view, book }) =>
        submission.children.map((child, g) => {
          const jobNums = view.filter((job) => job.group_index === g).map((job) => job.job_num);
          return jobNums.length > 0 ? child.signal(mayStartSignal, { job_nums: jobNums, ...(book ? { book } : {}) }) : undefined;
        }),
      ),
    ]);
  } else if (submission.delivered) {
    await submission.delivered;
  }
  submission.delivered = null;
}
