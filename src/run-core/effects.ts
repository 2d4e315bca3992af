import type { FiguresPurpose } from './events';
import type { Instance } from '../backends/backend';
import type { RunStatus, RunTerminationReason } from '../contract/run-state';
import type { Ending } from './ending';
import type { ServiceTableInput } from '../gateway/routing-table';
import type { ServiceProbe } from '../plan/plan-schema';

/**
 * What a policy asks the world for; the run's loop carries each one out (activities, signals,
 * search attributes, metrics) in the order given. A policy never does any of it itself.
 */
export type Effect =
  /** The run's status changed to `status` (already in the state): tell the search attributes and metrics. */
  | { kind: 'set-status'; status: RunStatus }
  /** The submission is over: stop its children and tear its jobs down. */
  | { kind: 'end-submission'; ending: Ending }
  /**
   * New machines for these ranks of `group`, each at its new attempt; `release`: the attempts they
   * replace, given back once the new ones are provisioned. `restart`: after a failure (counted).
   */
  | {
      kind: 'new-attempts';
      group: number;
      jobs: Array<{ job_num: number; attempt: number }>;
      release: Array<{ job_num: number; attempt: number; instance: Instance }>;
      restart: boolean;
    }
  /** A machine provisioned for an attempt replaced or removed meanwhile, or of a rank taken out: give it back. */
  | { kind: 'give-back'; job_num: number; attempt: number; instance: Instance }
  /** Stop these ranks (with grace) and give their machines back, then report `released` for resize `resize`. */
  | { kind: 'release'; resize: number; jobs: Array<{ job_num: number; attempt: number; instance: Instance }>; summary: string }
  /**
   * Write the live address book (version `version`) to these nodes, then run these `on_peers_change`
   * hooks; report `peers-published`. One entry per view of the book (a service that keeps its
   * revisions apart gives each revision's nodes their own: revisions.ts), carried out side by side.
   */
  | {
      kind: 'publish-peers';
      version: number;
      books: Array<{
        json: string;
        jobs: Array<{ job_num: number; attempt: number; instance: Instance }>;
        hooks: Array<{ job_num: number; attempt: number; instance: Instance; label: string; command: string }>;
      }>;
    }
  /** Put this routing table (its generation inside) on every gateway; report `routes-pushed`. */
  | { kind: 'push-routes'; generation: number; table: ServiceTableInput }
  /** Wait until no gateway has a request in flight to these replicas (at most `timeout_s`); report `drained` for resize `resize`. */
  | { kind: 'drain'; resize: number; urls: string[]; timeout_s: number }
  /** Read the service's figures per revision and entry group over the last `window_s` seconds on every gateway; report `figures` with the same purpose. */
  | { kind: 'read-figures'; window_s: number; purpose: FiguresPurpose }
  /** Read these replicas' Prometheus endpoints (each metric summed over its series); report `replica-metrics`. */
  | { kind: 'read-replica-metrics'; targets: Array<{ group: number; url: string; names: string[] }> }
  /** Gate A: a synthetic request (`probe`, or `GET /` without one) to each of the new revision's entry replicas; report `revision-checked`. */
  | { kind: 'check-revision'; revision: number; round: number; urls: string[]; probe: ServiceProbe | null }
  /** After teardown: submit the whole run again, after this back-off. */
  | { kind: 'resubmit'; after_s: number }
  /** After teardown: the run's final status, reason and message. */
  | { kind: 'finish'; status: RunStatus; reason: RunTerminationReason; message: string | null };

/** A policy's answer: the next core state and what to carry out. */
export interface Decision<S> {
  state: S;
  effects: Effect[];
}
