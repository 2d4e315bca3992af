import type { JobRef } from '../../src/backends/backend';

/**
 * What the workflow shell keeps for a live run beside its core (src/run-core/live.ts): the
 * resize Updates in their handlers, and machines to give back.
 */
export interface LiveRun {
  /** Groups whose resize Update is in its handler (one at a time per group). */
  resizing: Set<number>;
  /** Machines provisioned for attempts replaced or removed meanwhile: to give back. */
  unwanted: JobRef[];
}

export function newLiveRun(): LiveRun {
  return {
    resizing: new Set(),
    unwanted: [],
  };
}
