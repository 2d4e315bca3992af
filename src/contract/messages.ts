import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { JobRef } from '../backends/backend';
import type { JobPlan, Plan } from '../plan/plan-schema';
import type { AddressBook, JobEvent } from './message-schemas';
import type { JobState, RolloutStatus, RunState } from './run-state';

/** The messages between a user, a run and its group children (their schemas: src/contract/message-schemas.ts). */
export type { AddressBook, CarriedRun, JobEvent, PeersBook, RunInput, RunInputArg, RunOptions, RunOptionsInput } from './message-schemas';

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
/** These of the group's jobs may start now; a live run sends the book as it is now with them. */
export const mayStartSignal = defineSignal<[{ job_nums: number[]; book?: AddressBook }]>('mayStart');

/**
 * Run → group (groups that heal or scale): new machines for these ranks, each at its `attempt`
 * (a restart replaces a node, a resize adds one); `release`: the attempts they replace, given back
 * once the new ones are provisioned (so a replacement never lands on the machine it replaces).
 */
export const newAttemptsSignal = defineSignal<[{ jobs: JobPlan[]; release: JobRef[] }]>('newAttempts');
/** Run → group: these new attempts may start now, with the address book as it is now. */
export const startAttemptsSignal = defineSignal<[{ jobs: Array<{ job_num: number; attempt: number }>; book: AddressBook }]>('startAttempts');

/** What `scaleGroup` answers once the group has its new size. */
export interface ScaleGroupResult {
  group: string;
  /** The group's size now. */
  nodes: number;
  /** Global ranks of the nodes added (RUNNING, or READY with a probe). */
  added: number[];
  /** Global ranks of the nodes removed (stopped, their machines released). */
  removed: number[];
  /** The version of the address book on the nodes after the change. */
  peers_version: number;
  /** Asked while a rollout by revision was under way: the deployment that took it as its new revision's target (answered once it went through). */
  deployment?: number;
}

/**
 * User → run (Troupe's extension): resize a group declared `nodes: MIN..MAX`. Validated before it
 * is accepted (the group, its bounds, the run's state); answers once the new nodes run (or are
 * READY with a probe) or the removed ones are stopped and released.
 */
export const scaleGroupUpdate = defineUpdate<ScaleGroupResult, [{ group: string; nodes: number }]>('scaleGroup');

/** What `applyService` answers once the deployment is over. */
export interface ApplyServiceResult {
  /** Its number (dstack's deployment=N). */
  deployment: number;
  /** Groups whose replicas were replaced by ones with the new commands. */
  rolled: string[];
  /** Each group's replicas now. */
  groups: Array<{ name: string; replicas: number }>;
}

/**
 * User → run of a service: deploy this plan of it (`troupe apply` of a changed service). Validated
 * before it is accepted (the run's state, and what may change in a running service); answers once
 * every changed group is rolled or resized, and the gateways route by the new table.
 */
export const applyServiceUpdate = defineUpdate<ApplyServiceResult, [{ plan: Plan }]>('applyService');

/** What a service's rollout may be asked by hand (`troupe rollout pause|resume|rollback`). */
export type RolloutAction = 'pause' | 'resume' | 'rollback';

/** What `rolloutControl` answers: the rollout as it is once the action took (a rollback: once it is over). */
export interface RolloutControlResult {
  action: RolloutAction;
  rollout: RolloutStatus | null;
}

/**
 * User → run of a service: pause a coherent rollout where it is (no next step; its clocks stop),
 * resume it, or roll it back — the one under way (the old revision serving throughout), or, once one
 * is over, the last one (its old spec deployed again, as a new deployment). Validated before it is
 * accepted; a rollback answers once it is over.
 */
export const rolloutControlUpdate = defineUpdate<RolloutControlResult, [{ action: RolloutAction }]>('rolloutControl');

/** A resize's refusal type while the run continues as new: the request is fine, only early (the SDK asks again). */
export const HANDING_OVER = 'RunHandingOver';
