import type { RetryEvent } from '../plan/plan-schema';

/** How a submission ended, before teardown. */
export type Outcome =
  | { kind: 'done' }
  | { kind: 'failed'; job_num: number | null; retry_event: RetryEvent | null; message: string }
  | { kind: 'stopped'; abort: boolean }
  /** A live run's history is long: it continues as new, its jobs running on (workflows/run-handover.ts). */
  | { kind: 'handover' };

/** How a submission ended for good: what teardown, retry and the run's final status go by. */
export type Ending = Exclude<Outcome, { kind: 'handover' }>;

/** A failure as a policy outside the core reports it. */
export type Failure = Extract<Ending, { kind: 'failed' }>;
