import type { JobEvent } from '../contract/message-schemas';
import type { Plan } from '../plan/plan-schema';

/**
 * What the run's loop feeds its policies, in the order it happened. The handlers of the run's
 * messages turn each message into one of these and queue it; they change nothing themselves.
 * Events about one submission name it: one that arrives for another (a late child, a late
 * batch) is not that submission's.
 */
export type RunEvent =
  /** What a group child reports of its jobs. */
  | { kind: 'jobs'; submission: number; events: JobEvent[] }
  /** A user asks the run to stop (`abort`: without grace). */
  | { kind: 'stop'; abort: boolean }
  /** A group child ended on its own (failed, terminated). */
  | { kind: 'group-failed'; submission: number; message: string }
  /** The run unlocked the groups after job 0's attempt: addresses are due from now. */
  | { kind: 'unlocked' }
  /** Every job has its address and the book went out: start-up in order from now. */
  | { kind: 'announced' }
  /** Resize group `group` to `nodes` (the scaleGroup Update, once the fleet has room); `id` names its answer. */
  | { kind: 'resize'; id: number; group: number; nodes: number }
  /** The ranks a resize took out are stopped and given back (`error`: why not). */
  | { kind: 'released'; id: number; error: string | null }
  /** The resize's Update has its answer: it is forgotten. */
  | { kind: 'resize-answered'; id: number }
  /** A publication of the live address book is over: the hooks that failed, or why it was not delivered. */
  | { kind: 'peers-published'; version: number; failed_hooks: Array<{ label: string; exit_code: number; output: string }>; error: string | null }
  /** A push of the service's routing table is over: the service's endpoints, or why it did not reach every gateway. */
  | { kind: 'routes-pushed'; generation: number; endpoints: string[]; error: string | null }
  /**
   * A resize's ranks have no request in flight on any gateway, or its drain's time is up (`left` still in
   * flight), or it could not be asked (`error`: the gateways did not answer; null when it was).
   */
  | { kind: 'drained'; id: number; left: number; error: string | null }
  /**
   * Deploy this plan of the service (the applyService Update; `id` names its answer). `restore`: the
   * last good spec again (`troupe rollout rollback` once a rollout went through), rolled without a
   * canary — its gate would judge a spec known to serve against the revision the user is leaving.
   */
  | { kind: 'deploy'; id: number; plan: Plan; restore?: true }
  /**
   * A reading of the service's figures on the gateways over the last `window_s` seconds, for a canary's
   * gate or the autoscaler, or why it could not be read: per revision, and per revision and entry group
   * (requests answered in the window, requests in flight now).
   */
  | {
      kind: 'figures';
      purpose: FiguresPurpose;
      window_s: number;
      revisions: Array<{ revision: number; requests: number; errors: number; p95_ms: number | null }>;
      groups: Array<{ revision: number; group: string; requests: number; inflight: number }>;
      /** Requests the gateways hold now for want of a ready entry replica (a service scaled to zero), and those held in the window. */
      held: number;
      held_total: number;
      error: string | null;
    }
  /**
   * A reading of replicas' own metrics (read-replica-metrics): each replica's values by metric name
   * (summed over its series), or why it could not be read.
   */
  | { kind: 'replica-metrics'; replicas: Array<{ group: number; url: string; values: Record<string, number> | null; error: string | null }> }
  /** Gate A's synthetic requests answered: null error, each passed (`note` says how); else the first that failed. */
  | { kind: 'revision-checked'; revision: number; round: number; note: string | null; error: string | null }
  /** The rollout under way paused, resumed or rolled back by hand (the rolloutControl Update, once accepted). */
  | { kind: 'rollout-control'; action: 'pause' | 'resume' | 'rollback'; why?: string }
  /** The deployment's Update has its answer: it is forgotten. */
  | { kind: 'deploy-answered'; id: number }
  /** Look again: time passed, or a step outside the core changed the jobs. */
  | { kind: 'tick' };

/** Who asked for a reading of a service's figures: a canary's gate, or the autoscaler. */
export type FiguresPurpose = 'canary' | 'autoscale';
