import { z } from 'zod';
import { JobPlanSchema, PlanSchema, RetryEventSchema, RetryPolicySchema, ScalingPlanSchema, ServiceRunSchema } from '../plan/plan-schema';
import { RunStateSchema } from './run-state-schema';

/**
 * The run core's state as zod schemas: its types (state.ts, live.ts, ending.ts) are inferred from
 * them, and the next execution of a run checks what it is handed with them (hand-over is the core
 * itself, carried as it is). Workflow code imports only the types: a workflow's modules are
 * evaluated again for every new workflow, and zod's are the largest.
 */

/** The run's live address book, as every node's peers.json holds it (README: TROUPE_PEERS_FILE). */
export const PeersBookSchema = z.object({
  version: z.number().int().nonnegative(),
  run_name: z.string(),
  /** The revision whose replicas this view shows (a service that keeps its revisions apart); absent: every rank. */
  revision: z.number().int().nonnegative().optional(),
  groups: z.array(
    z.object({
      name: z.string(),
      index: z.number().int(),
      nodes: z.array(
        z.object({
          rank: z.number().int(),
          group_rank: z.number().int(),
          /** Null while the node is restarting (no machine). */
          ip: z.string().nullable(),
          gpus: z.number().int().nonnegative(),
          attempt: z.number().int().nonnegative(),
          status: z.enum(['starting', 'running', 'ready', 'restarting', 'draining', 'ended']),
          ready: z.boolean(),
        }),
      ),
    }),
  ),
});
export type PeersBook = z.infer<typeof PeersBookSchema>;
export const EndingSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('done') }),
  z.object({ kind: z.literal('failed'), job_num: z.number().int().nullable(), retry_event: RetryEventSchema.nullable(), message: z.string() }),
  z.object({ kind: z.literal('stopped'), abort: z.boolean() }),
]);

export const SubmissionCoreSchema = z.object({
  /**
   * `unlocking` until job 0 has its machine; `addressing` until every job has an address (by
   * `addresses_due_ms`); `started` once the book went out and jobs start in order.
   */
  phase: z.enum(['unlocking', 'addressing', 'started']),
  addresses_due_ms: z.number().nullable(),
  /** When its first job ran (epoch ms): `max_duration` counts from it. */
  running_since_ms: z.number().nullable(),
  /** The first group child that failed on its own, as the run's message. */
  group_failure: z.string().nullable(),
  /** How it ends, once decided: from then on its jobs are teardown's, their events no longer count. */
  ending: EndingSchema.nullable(),
});

/**
 * A resize of one group: `growing` until its new ranks run, `draining` while a service's ranks to
 * remove are off the gateways and their requests in flight finish, `releasing` while removed ones
 * are given back, `over` once answered.
 */
export const ResizeSchema = z.object({
  id: z.number().int(),
  group: z.number().int().nonnegative(),
  /** `with-rollout`: a user's resize taken as a rollout's target for the group, answered once that rollout is over. */
  phase: z.enum(['growing', 'draining', 'releasing', 'with-rollout', 'over']),
  added: z.array(z.number().int()),
  removed: z.array(z.number().int()),
  /** A service's ranks to remove, still running while they drain (the routing table lists them no more). */
  draining: z.array(z.number().int()),
  /** The drain was asked of the gateways (once the table without them is on every one). */
  drain_asked: z.boolean(),
  error: z.string().nullable(),
  /** The deployment whose rollout took it as its target (phase `with-rollout`, then kept for the answer). */
  with_deployment: z.number().int().optional(),
});

/** Job numbers as a record's keys (JSON has string keys only). */
const byJobNum = <T extends z.ZodType>(value: T) => z.record(z.string().regex(/^\d+$/), value);

export const LiveCoreSchema = z.object({
  /** Per group: when each of its restarts began (epoch ms): the `on_failure` budget. */
  restart_times: z.array(z.array(z.number())),
  /** Per group: where it is in a restart. */
  groups: z.array(
    z.object({
      /** Its nodes are being replaced: over once every one of them is READY again on its new attempt. */
      restarting: z.boolean(),
      /** `on_dependency_restart: restart`: its running nodes restart once the groups it depends on are back. */
      restart_after_dependencies: z.boolean(),
    }),
  ),
  /** New attempts provisioned or provisioning, not yet let start: job_num → attempt. */
  attempts_to_start: byJobNum(z.number().int().nonnegative()),
  /** Ranks added by a resize under way that have not run yet: a failure of theirs undoes the addition. */
  added_by_resize: z.array(z.number().int()),
  /** Plans of the ranks resizes added (the task's plan has the first ranks only), by job_num. */
  added_plans: byJobNum(JobPlanSchema),
  /** Resizes under way (one per group at most), until their Update has its answer. */
  resizes: z.array(ResizeSchema),
  peers: z.object({
    /** The current book (its version goes up when its content changes). */
    book: PeersBookSchema.nullable(),
    /** The book's content without its version: how a change is seen. */
    key: z.string(),
    /** Per rank: the attempt and book version its node has. */
    sent: byJobNum(z.object({ attempt: z.number().int(), version: z.number().int() })),
    /** Per rank: the state of its group's dependencies its node last saw (its start book, or its last hook). */
    seen: byJobNum(z.object({ attempt: z.number().int(), key: z.string() })),
    /** A publication under way: the version, and the nodes and hooks it is for. */
    publishing: z
      .object({
        version: z.number().int(),
        targets: z.array(z.object({ job_num: z.number().int(), attempt: z.number().int() })),
        hooks: z.array(z.object({ job_num: z.number().int(), attempt: z.number().int(), key: z.string() })),
      })
      .nullable(),
    /** What last went wrong delivering the book or running a hook (shown as the run's message), or null. */
    problem: z.string().nullable(),
  }),
});

/** A service's routing: the tables the run asked the gateways for, and what they took (routing.ts). */
/** What a deployment changes of a service's plan: its service settings and each group's commands and size. */
export const SpecSchema = z.object({
  service: ServiceRunSchema,
  groups: z.array(
    z.object({
      commands: z.array(z.string()),
      nodes: z.number().int(),
      nodes_range: z.object({ min: z.number().int(), max: z.number().int() }).nullable(),
      scaling: ScalingPlanSchema.nullable().optional(),
    }),
  ),
});
export type Spec = z.infer<typeof SpecSchema>;

/** A rollout that keeps revisions apart: the new revision started whole, traffic moved, the old retired. */
export const CoherentRolloutSchema = z.object({
  /** The new revision (the deployment's number) and the one serving before it. */
  revision: z.number().int().nonnegative(),
  from: z.number().int().nonnegative(),
  /**
   * `starting`: the new revision's replicas start, group by group in depends_on order, each group READY
   * before the next; `shifting`: the gateways take the table with the new revision current; `retiring`:
   * the old revision's replicas are drained and stopped, entry groups first; `rolling-back`: the new
   * revision's are stopped, the old one serving as it did (its replicas retired by earlier rounds started
   * again first). `canary` between starting and shifting, in every round but the last (and in a one-round
   * rollout with a canary): the new revision takes its share of new requests, over the canary's soak with
   * its figures gated where there is one. A round but the last ends with `retiring` its share of the old
   * revision (the new one still taking its share), then the next round starts.
   */
  phase: z.enum(['starting', 'canary', 'shifting', 'retiring', 'rolling-back']),
  /** Groups this phase has still to do, in order. */
  queue: z.array(z.number().int()),
  /** Replicas the new revision wants, by group index (its target once the last round is through). */
  counts: z.array(z.number().int().nonnegative()),
  /** Replicas the old revision had, by group index: what a rollback gives it again. */
  from_counts: z.array(z.number().int().nonnegative()),
  /** The round under way (1-based) of `rounds` (rollout.steps, more where max_surge asks): each starts its share of the new revision and retires as much of the old. */
  round: z.number().int().positive(),
  rounds: z.number().int().positive(),
  /** The new revision's share of new requests (percent) while both serve, or null: the current revision takes them all. */
  share_percent: z.number().nullable(),
  /** What the deployment changed of the plan, as it was: put back by a rollback. */
  undo: SpecSchema,
  /** Past it, a rollout still starting is rolled back (epoch ms). */
  deadline_ms: z.number(),
  /** Why it is rolling back, or null. */
  cause: z.string().nullable(),
  /** The canary: its share, since when every gateway gives it (epoch ms; null: not yet), whether a reading of the figures is under way, when the last was asked, and its verdict. */
  canary: z.object({
    /** Its share of new requests (null: no canary). */
    traffic_percent: z.number().nullable(),
    since_ms: z.number().nullable(),
    reading: z.boolean(),
    read_at_ms: z.number().nullable(),
    gate: z.string().nullable(),
  }),
  /** Paused by hand since (epoch ms), or null: no next step, and its clocks (deadline, soak) stopped. */
  paused_at_ms: z.number().nullable(),
  /**
   * Gate A of a round: once its share is READY, a synthetic request (the entry group's first probe) sent
   * to each new entry replica must pass end to end before the share takes traffic. The round it is
   * for, whether it is `checking` or `passed`, and what it found.
   */
  synthetic: z.object({ round: z.number().int().positive(), state: z.enum(['checking', 'passed']), note: z.string().nullable() }).nullable().default(null),
});

export type CoherentRollout = z.infer<typeof CoherentRolloutSchema>;

/** One reading of a replica's own metrics (null: the metric is not read, or the replica did not export it). */
export const ReplicaSampleSchema = z.object({ url: z.string(), group: z.number().int(), at_ms: z.number(), requests: z.number().nullable(), inflight: z.number().nullable() });
export type ReplicaSample = z.infer<typeof ReplicaSampleSchema>;

export const ServiceCoreSchema = z.object({
  /** The generation of the last table asked for (0: none yet); a gateway refuses an older one. */
  generation: z.number().int().nonnegative(),
  /** That table's content without its generation: how a change is seen. */
  key: z.string(),
  /** The generation a push under way carries, or null. */
  pushing: z.number().int().nullable(),
  /** The content every gateway last took (null: none yet). */
  delivered_key: z.string().nullable(),
  /** After a failed push: when to push again (epoch ms). */
  retry_at_ms: z.number().nullable(),
  /** When the gateways last took the table (epoch ms): it is pushed again every ROUTES_REFRESH_MS. */
  pushed_at_ms: z.number().nullable(),
  /** What last went wrong pushing (shown as the run's message), or null. */
  problem: z.string().nullable(),
  /** The deployment running (0: as submitted; +1 per `troupe apply` of a changed service). */
  deployment: z.number().int().nonnegative(),
  /** The deployment (revision) each rank's current replica started with, by job_num (absent: 0). */
  revision_of: byJobNum(z.number().int().nonnegative()),
  /** The revision new requests go to (the gateways' current_revision): the last one a rollout made serve. */
  current_revision: z.number().int().nonnegative(),
  /** The spec the last coherent rollout that went through replaced: what `troupe rollout rollback` deploys again (null: none). */
  last_good: SpecSchema.nullable(),
  /** Resizes deployments made so far: the next one's id. */
  resizes_made: z.number().int().nonnegative(),
  /** The deployment under way or just over (until its Update has its answer), or null. */
  rollout: z
    .object({
      /** The Update's id for it. */
      id: z.number().int(),
      number: z.number().int().nonnegative(),
      /** What is left to do, in order: resizes, then a roll per group whose commands changed. */
      steps: z.array(z.object({ kind: z.enum(['resize', 'roll']), group: z.number().int(), nodes: z.number().int() })),
      /** The resize under way: a resize step, a new replica added, or an old one removed. */
      step: z.object({ group: z.number().int(), phase: z.enum(['resizing', 'adding', 'removing', 'restoring']), resize: z.number().int() }).nullable(),
      /** Groups rolled so far. */
      rolled: z.array(z.number().int()),
      /** A rollout by revision (coherent-rollout.ts), or null: dstack's rolling, group by group. */
      coherent: CoherentRolloutSchema.nullable(),
      error: z.string().nullable(),
      over: z.boolean(),
    })
    .nullable(),
  /** The autoscaler (autoscaling.ts): groups with `scaling` resized from the gateways' figures. */
  autoscale: z
    .object({
      /** Windows (s) whose reading is asked and not answered yet. */
      reading: z.array(z.number().int()),
      /** When the last readings were asked (epoch ms), or null: none yet. */
      read_at_ms: z.number().nullable(),
      /** By group index: its size as the autoscaler last saw it and since when (epoch ms): a delay counts from a size's start. */
      sizes: z.array(z.object({ nodes: z.number().int(), since_ms: z.number() }).nullable()),
      /** By group index: the last verdict (the metric's value, the replicas it asks for), or null. */
      last: z.array(z.object({ value: z.number(), wanted: z.number().int(), at_ms: z.number(), /** Requests the gateways held in the window, where they woke a group scaled to zero. */ held: z.number().int().optional() }).nullable()),
      /** Resizes it began so far: the next one's id. */
      resizes_made: z.number().int().nonnegative(),
      /** Why the last reading failed, or null. */
      problem: z.string().nullable(),
      /** A reading of replicas' own metrics (replica-traffic.ts) is asked and not answered yet. */
      scraping: z.boolean().default(false),
      /** The last reading of the gateways' figures showed requests held (now or in the window): a group that scales from zero keeps one replica at least. */
      held_seen: z.boolean().default(false),
      /** Groups behind the router with `replica_metrics`: their replicas' samples over the longest window. */
      samples: z.array(ReplicaSampleSchema).default([]),
    })
    .default({ reading: [], read_at_ms: null, sizes: [], last: [], resizes_made: 0, problem: null, scraping: false, held_seen: false, samples: [] }),
});

export const RunCoreSchema = z.object({
  /** What queries answer; its job records are changed in place by the loop's steps (jobs.ts). */
  run: RunStateSchema,
  plan: PlanSchema,
  limits: z.object({
    /** How long after the other groups are unlocked every job may take to get its address. */
    address_deadline_s: z.number().positive(),
    /** One provisioning attempt's limit (added to what is left of a no-capacity retry). */
    provision_attempt_timeout_s: z.number().positive(),
  }),
  retry: RetryPolicySchema.nullable(),
  /** Epoch ms when `retry.duration` runs out (null: no retry). */
  retry_deadline_ms: z.number().nullable(),
  /** The next back-off before a resubmission (doubles each time, up to BACKOFF_MAX_S). */
  backoff_s: z.number().positive(),
  /** Asked to stop (`abort`: without grace). Outlives a submission. */
  stop_request: z.object({ abort: z.boolean() }).nullable(),
  /** The retry event each failed job counts as, by job_num (exits with an error count as `error`). */
  failure_events: byJobNum(RetryEventSchema.nullable()),
  submission: SubmissionCoreSchema,
  /** Healing and resizing (null: the run uses none of Troupe's live extensions). */
  live: LiveCoreSchema.nullable(),
  /** A service's routing (null: a task). */
  service: ServiceCoreSchema.nullable(),
});

/** What a run hands its next execution of its core: all of it but the plan, which the run's input has. */
export const CarriedCoreSchema = RunCoreSchema.omit({ plan: true });
