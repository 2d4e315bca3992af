import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { AddressBook, JobEvent } from './message-schemas';
import type { JobState, RunState } from './run-state';

/** The messages between a user, a run and its group children (their schemas: workflows/message-schemas.ts). */
export type { AddressBook, JobEvent, RunInput, RunInputArg, RunOptions, RunOptionsInput } from './message-schemas';

/** User → run. */
export const stopRunSignal = defineSignal<[{ abort: boolean }]>('stopRun');
export const runStateQuery = defineQuery<RunState>('runState');
/** The jobs of a run whose state answers come without them (`jobs_paged`), a page at a time. */
export const runJobsQuery = defineQuery<JobState[], [{ offset: number; limit: number }]>('runJobs');

/** Group child → run: what happened to its jobs. */
export const jobEventsSignal = defineSignal<[{ submission: number; events: JobEvent[] }]>('jobEvents');

/** Run → group child. */
export const unlockGroupSignal = defineSignal('unlockGroup');
/**
 * Every job has its address, and these of the group's jobs may start now. Small runs carry the book
 * here; larger ones leave it out, and the activities that start jobs read it from the run
 * (`runAddressBook`), so that it is in the run's history once rather than once per group.
 */
export const addressesReadySignal = defineSignal<[{ job_nums: number[]; book?: AddressBook }]>('addressesReady');
/** The current submission's address book (null before it is complete, or for another submission). */
export const runAddressBookQuery = defineQuery<AddressBook | null, [{ submission: number }]>('runAddressBook');
export const mayStartSignal = defineSignal<[{ job_nums: number[] }]>('mayStart');
