import type { z } from 'zod';
import type { EndingSchema } from '../contract/core-state-schema';

/** How a submission ended for good: what teardown, retry and the run's final status go by. */
export type Ending = z.infer<typeof EndingSchema>;

/** How a submission ended, before teardown; or a live run's history is long and it continues as new, its jobs running on (workflows/run/run-handover.ts). */
export type Outcome = Ending | { kind: 'handover' };

/** A failure as a policy reports it. */
export type Failure = Extract<Ending, { kind: 'failed' }>;
