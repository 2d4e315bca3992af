import type { JobRef } from '../src/backends/backend';
import type { GroupPlan, JobPlan, Plan } from '../src/plan/plan-schema';
import type { PeersBook } from './messages';
import type { JobState } from './run-state';

/**
 * What the workflow shell keeps for a live run beside its core (src/run-core/live.ts): resizes
 * under way, the plans of ranks resizes added, machines to give back, and the live address book.
 */
export interface LiveRun {
  /** Groups being resized (one resize at a time per group). */
  resizing: Set<number>;
  /** Plans of the ranks added by resizes (the task's plan has the first ranks only). */
  addedPlans: Map<number, JobPlan>;
  /** Machines provisioned for attempts replaced or removed meanwhile: to give back. */
  unwanted: JobRef[];
  peers: LivePeers;
}

export interface LivePeers {
  /** The current book (its version goes up when its content changes). */
  book: PeersBook | null;
  /** The book's content without its version: how a change is seen. */
  key: string;
  /** Per rank: the attempt and book version its node has. */
  sent: Map<number, { attempt: number; version: number }>;
  /** Per rank: the state of its group's dependencies its node last saw (its start book, or its last hook). */
  seen: Map<number, { attempt: number; key: string }>;
  publishing: boolean;
  /** What last went wrong delivering the book or running a hook (shown as the run's message), or null. */
  problem: string | null;
}

export function newLiveRun(): LiveRun {
  return {
    resizing: new Set(),
    addedPlans: new Map(),
    unwanted: [],
    peers: { book: null, key: '', sent: new Map(), seen: new Map(), publishing: false, problem: null },
  };
}

/** The plan of a rank at its current attempt: the task's, or the one a resize made. */
export function jobPlanOf(plan: Plan, live: LiveRun | null, job: JobState): JobPlan {
  const base = plan.jobs[job.job_num] ?? live?.addedPlans.get(job.job_num);
  if (!base) throw new Error(`no plan for job ${job.job_num}`);
  return job.attempt > 0 ? { ...base, attempt: job.attempt } : base;
}

/** A new rank of `group` (a resize): dstack's job name, the group's commands and ports. */
export function newRankPlan(runName: string, group: GroupPlan, jobNum: number, groupRank: number): JobPlan {
  return {
    job_num: jobNum,
    job_name: `${runName}-${jobNum}-0`,
    node_group_index: group.index,
    node_group_name: group.name,
    node_group_job_index: groupRank,
    global_master: false,
    group_master: false,
    commands: [...group.commands],
    ports: group.ports.map((p) => ({ ...p })),
  };
}
