import type { JobRef } from '../src/backends/backend';
import type { PeersBook } from './messages';

/**
 * What the workflow shell keeps for a live run beside its core (src/run-core/live.ts): the
 * resize Updates in their handlers, machines to give back, and the live address book.
 */
export interface LiveRun {
  /** Groups whose resize Update is in its handler (one at a time per group). */
  resizing: Set<number>;
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
    unwanted: [],
    peers: { book: null, key: '', sent: new Map(), seen: new Map(), publishing: false, problem: null },
  };
}
