/**
 * A service's rollout under load on the LOCAL fleet (network namespaces, real processes, as root):
 * the stand-in PD service (examples/services/stand-in-model.py), router 1 / prefill 2 / decode 2,
 * behind a gateway in this process, served by a worker process with the real local fleet, on its
 * own Temporal dev server. An open loop of 50 requests a second for 60 s goes through the gateway
 * (127.0.0.1 only); a few seconds in, a deployment changes every group's commands. Each answer
 * says which revision its router, prefill and decode replicas ran (their TROUPE_REVISION) and the
 * gateway's `troupe-revision` header says which revision's pool took it. Prints, beside issue 28's
 * anchors, and asserts nothing:
 *   - `rollout: {coherence: revision, steps: 2, canary: {traffic: 20, soak: 5s}}` (issue 28's "2 steps,
 *     5 s soak"): requests sent, failed, mixed-revision chains, the rollout's time from the Update sent
 *     to its answer, when the new revision answered first and the old last;
 *   - the same with `coherence: independent` (dstack's rolling, a replica at a time) beside it;
 *   - a bad revision (a decode that cannot start: `exit 1`) applied under load to the coherent run:
 *     failed requests, the time from the apply to the Update's rollback answer, and whether any
 *     replica of the serving revision was restarted or replaced;
 *   - the canary's bad revision on the coherent run: `rollout: canary: {traffic: 20, soak: 10s}` with
 *     decode's stand-in at `--error-rate 0.2`, under 50 rps for 30 s: when the run's state showed the
 *     gate failed (polled every 100 ms), the last request the gateway gave the canary after it (its
 *     `troupe-revision` header), when no replica of the canary was left, failed requests by revision
 *     and send time, and whether a replica of the serving revision was restarted or replaced.
 * Writes bench/results/rollout.{json,png} (requests per second by revision over each rollout).
 *
 *   npx tsx bench/rollout.ts              BENCH_ROLLOUT_RPS=50, BENCH_ROLLOUT_SECONDS=60 by default
 *   BENCH_ROLLOUT_ONLY=canary npx tsx bench/rollout.ts   the canary alone, on a coherent run of its own;
 *                                         its figures replace the canary's in the saved JSON
 *   BENCH_PLOT_ONLY=1 npx tsx bench/rollout.ts   the figure again from the saved JSON
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { REVISION_HEADER } from '../src/gateway/data-plane';
import { loadServicePlan, serviceRunPlan } from '../src/plan';
import { runWorkflowId } from '../src/contract/ids';
import { applyServiceUpdate, runStateQuery } from '../src/contract/messages';
import type { RunState } from '../src/contract/run-state';
import type { Plan } from '../src/plan/plan-schema';
import type { Leftovers } from '../test/helpers/leftovers';
import { standInPdServiceYaml } from '../test/helpers/stand-in-service';
import { loadAverage } from './harness/cpu';
import { openLoop } from './harness/open-loop';
import { resultsDir } from './harness/results';
import { fmt, percentile } from './harness/stats';
import { startStandInServiceBench, stopStandInRun, type StandInServiceBench } from './harness/stand-in-service-bench';
import { lineChart, stackVertically, writePng, type Series } from './plot/charts';

const RATE = Number(process.env.BENCH_ROLLOUT_RPS ?? 50);
const SECONDS = Number(process.env.BENCH_ROLLOUT_SECONDS ?? 60);
/** The deployment is applied this far into the load. */
const DEPLOY_AT_S = 5;
/** The bad revision's load: shorter, it only has to cover the apply and its rollback. */
const BAD_SECONDS = 20;
const BAD_DEPLOY_AT_S = 3;
/** A request unanswered this long after its scheduled time counts as failed. */
const REQUEST_TIMEOUT_MS = 20_000;
const WAIT_LIMIT_MS = 180_000;
/** Issue 28's anchors (its "Done when"). */
const ANCHOR = { minRequests: 3000, failed: 0, mixed: 0, rolloutS: 30 };

/** The coherent rollout's settings (issue 28's anchor: 2 steps, a 5 s soak): half of each group per round, the first round's share a canary gated over 5 s. */
const COHERENT_ROLLOUT = ['  steps: 2', '  canary: {traffic: 20, soak: 5s}'];
/**
 * Issue 28's canary scenario: a new revision whose decode answers 20 % errors (`--error-rate 0.2`),
 * sent 20 % of new requests for a 10 s soak and rolled back by its gate over the gateways' figures
 * per revision (read every second); its anchors: all traffic back on the old revision ≤ 1 s after
 * the failing gate, the new revision stopped ≤ 5 s after, failures only inside the canary share.
 */
const CANARY_ROLLOUT = '  canary: {traffic: 20, soak: 10s}';
const CANARY_DECODE_FLAGS = ' --error-rate 0.2';
/** The canary's load: it covers the new revision's start (~7 s), the gate and the stop. */
const CANARY_SECONDS = 30;
const CANARY_DEPLOY_AT_S = 3;
/** How often the run's state is read for the rollout's phase and the canary's replicas. */
const POLL_MS = 100;
const CANARY_ANCHOR = { traffic_back_s: 1, new_stopped_s: 5 };

interface Chain {
  router: string;
  prefill: string;
  decode: string;
}

/** One request of the load: when it left (s from the load's start), how it ended, who served it. */
interface Answer {
  sent_s: number;
  /** When its answer (or its failure) was complete, s from the load's start (null: not yet). */
  done_s: number | null;
  ok: boolean;
  /** The gateway's `troupe-revision` header: the revision whose pool took the request. */
  header: string | null;
  chain: Chain | null;
  error: string | null;
}

interface LoadFigures {
  sent: number;
  failed: number;
  mixed: number;
  p50_ms: number;
  p99_ms: number;
  max_lag_ms: number;
  first_errors: string[];
}

interface RolloutResult {
  coherence: 'revision' | 'independent';
  load: LoadFigures;
  revisions: { old: string; new: string };
  /** From the load's start: the Update sent and answered, the new revision's first answer, the old's last. */
  update_sent_s: number;
  update_answered_s: number;
  rollout_s: number;
  update_answer: string;
  new_first_answer_s: number | null;
  old_last_answer_s: number | null;
  /** Requests per second (by send time) whose router ran each revision; `mixed` and `failed` apart. */
  per_second: Record<string, number[]>;
  old_replicas_left: number;
  restarts: number;
  leftovers: Leftovers | null;
}

interface BadRevisionResult {
  load: LoadFigures;
  apply_to_rollback_s: number;
  update_answer: string;
  rolled_back: boolean;
  /** Replicas serving before the apply that are gone or on another instance after it. */
  serving_replaced: number;
  restarts: number;
  new_revision_answers: number;
}

/**
 * When the bench saw something in the run's state, in s from the load's start: the send time of the
 * last poll that did not see it and the answer time of the first that did (it happened in between).
 */
interface Seen {
  before_s: number;
  by_s: number;
}

interface CanaryResult {
  date: string;
  load_average: number[];
  rate: number;
  seconds: number;
  deploy_at_s: number;
  poll_ms: number;
  load: LoadFigures;
  /** The revisions as the gateway's `troupe-revision` header names them (deployment numbers). */
  revisions: { old: number; new: number };
  update_sent_s: number;
  update_answered_s: number;
  update_answer: string;
  rolled_back_by_gate: boolean;
  /** The gate's verdict as the run's state last showed it. */
  gate: string | null;
  /** The rollout's phase `canary` (its share on the gateways), then `rolling-back` (the gate failed), then no replica of the canary left. */
  canary_phase: Seen | null;
  gate_failed: Seen | null;
  new_stopped: Seen | null;
  /** The canary's replicas' finished_at (workflow time), the last of them, in s from the load's start. */
  new_last_finished_s: number | null;
  /** The same by group, the last of each, in s after the gate (before_s): where the stop's time goes. */
  new_finished_by_group: Record<string, number>;
  /** Requests the gateway gave the canary (its header): first and last sent, last answered. */
  new_requests: number;
  new_first_sent_s: number | null;
  new_last_sent_s: number | null;
  new_last_done_s: number | null;
  /** The canary's share of requests sent from its first to the gate (before_s). */
  new_share_percent: number | null;
  /** Anchors, each from the earliest the gate can have failed (gate_failed.before_s): upper bounds. */
  traffic_back_s: number | null;
  traffic_back_answered_s: number | null;
  new_stopped_after_gate_s: number | null;
  update_answered_after_gate_s: number | null;
  /** Failed requests by the revision whose pool took them (`none`: no answer), and those sent outside the canary's window (its first request to its last). */
  failed_by_revision: { new: number; old: number; none: number };
  failed_outside_window: number;
  /** Failed requests of the canary sent after the gate failed (before the table without its share was on the gateway). */
  failed_after_gate: number;
  /** Replicas serving before the apply that are gone or on another instance after it; their restarts. */
  serving_replaced: number;
  restarts: number;
  per_second: Record<string, number[]>;
  leftovers: Leftovers | null;
}

interface Results {
  date: string;
  machine: string;
  load_average: number[];
  rate: number;
  seconds: number;
  deploy_at_s: number;
  revision: RolloutResult;
  independent: RolloutResult;
  bad_revision: BadRevisionResult | null;
  canary: CanaryResult | null;
}

const live = (s: RunState) => s.jobs.filter((j) => !j.removed);
const allReady = (s: RunState) => live(s).length === 5 && live(s).every((j) => j.status === 'READY');
const short = (hash: string) => hash.slice(0, 8);
const secs = (x: number | null) => (x === null || !Number.isFinite(x) ? 'n/a' : `${x.toFixed(1)} s`);
const failureText = (err: unknown) => (err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err));

/** The stand-in PD service, planned; `more`: a command before decode's stand-in (a broken one: `exit 1`), its flags, `rollout:` lines. */
function service(name: string, script: string, coherence: 'revision' | 'independent', label: string, more: { decode?: string; decodeFlags?: string; rollout?: string[] } = {}): Plan {
  return serviceRunPlan(loadServicePlan(standInPdServiceYaml({ name, script, label, coherence, ...more }), `${name}.yml`, { environ: {} }), null);
}

type Bench = StandInServiceBench;

async function stateOf(bench: Bench, name: string): Promise<RunState> {
  return await bench.temporal.client.workflow.getHandle(runWorkflowId(name)).query(runStateQuery);
}

/** The run's state once `check` holds (polled every 100 ms). */
async function waitFor(bench: Bench, name: string, check: (s: RunState) => boolean, what: string): Promise<RunState> {
  const deadline = Date.now() + WAIT_LIMIT_MS;
  for (;;) {
    const state = await stateOf(bench, name);
    if (check(state)) return state;
    if (['DONE', 'FAILED', 'TERMINATED'].includes(state.status)) throw new Error(`run ${name} ended ${state.status} waiting for ${what}: ${state.message}`);
    if (Date.now() > deadline) throw new Error(`run ${name}: no ${what} within ${WAIT_LIMIT_MS / 1000} s: ${JSON.stringify(state.jobs.map((j) => j.status))}`);
    await sleep(100);
  }
}

/**
 * The open loop through the gateway for `seconds`, `during` called `deployAt` seconds in (not
 * awaited by the schedule). Every answer kept with its send time and who served it.
 */
async function underLoad(bench: Bench, name: string, seconds: number, deployAt: number, during: (at: () => number) => Promise<void>) {
  const pool = new Pool(bench.gateway.url, { connections: 256 });
  const answers: Answer[] = [];
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }] });
  const t0 = performance.now();
  const at = () => (performance.now() - t0) / 1000;
  const send = async (signal: AbortSignal) => {
    const answer: Answer = { sent_s: at(), done_s: null, ok: false, header: null, chain: null, error: null };
    answers.push(answer);
    try {
      const res = await pool.request({ path: `/services/${name}/v1/chat/completions`, method: 'POST', headers: { 'content-type': 'application/json' }, body, signal });
      const text = await res.body.text();
      const header = res.headers[REVISION_HEADER];
      answer.header = typeof header === 'string' ? header : null;
      if (res.statusCode !== 200) throw new Error(`${res.statusCode} ${text.trim().slice(0, 200)}`);
      const mark = (JSON.parse(text) as { troupe: { revision: string; prefill: { revision: string }; decode: { revision: string } } }).troupe;
      answer.chain = { router: mark.revision, prefill: mark.prefill.revision, decode: mark.decode.revision };
      answer.ok = true;
    } catch (err) {
      answer.error = err instanceof Error ? err.message : String(err);
      throw err;
    } finally {
      answer.done_s = at();
    }
  };
  // Settled here, so a failed deployment is reported after the load, not as an unhandled rejection.
  const deployed = sleep(deployAt * 1000)
    .then(() => during(at))
    .then(
      () => null,
      (err: unknown) => err,
    );
  const loop = await openLoop({ rate: RATE, seconds, send, timeoutMs: REQUEST_TIMEOUT_MS });
  const deployError = await deployed;
  await pool.close();
  if (deployError !== null) throw deployError;
  const mixed = answers.filter((a) => a.chain && (a.chain.router !== a.chain.prefill || a.chain.router !== a.chain.decode));
  const figures: LoadFigures = {
    sent: loop.sent,
    failed: loop.failed,
    mixed: mixed.length,
    p50_ms: percentile(loop.latenciesMs, 50),
    p99_ms: percentile(loop.latenciesMs, 99),
    max_lag_ms: loop.maxLagMs,
    first_errors: loop.errors,
  };
  return { answers, figures };
}

/** Requests per second by send time: answered by each revision's router (mixed chains apart), and failed. */
function perSecond(answers: Answer[], seconds: number, labels: Map<string, string>): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  const add = (key: string, second: number) => {
    const row = (out[key] ??= Array<number>(seconds).fill(0));
    if (second >= 0 && second < seconds) row[second] = (row[second] ?? 0) + 1;
  };
  for (const a of answers) {
    const second = Math.floor(a.sent_s);
    if (!a.ok || !a.chain) add('failed', second);
    else if (a.chain.router !== a.chain.prefill || a.chain.router !== a.chain.decode) add('mixed chain', second);
    else add(labels.get(a.chain.router) ?? `revision ${short(a.chain.router)}`, second);
  }
  return out;
}

/** The service's run started with `plan`, once every replica is READY and routed. */
async function startService(bench: Bench, name: string, plan: Plan) {
  const handle = await bench.temporal.client.workflow.start('RunWorkflow', {
    taskQueue: bench.taskQueue,
    workflowId: runWorkflowId(name),
    args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }],
  });
  const first = await waitFor(bench, name, (s) => allReady(s) && (s.service?.table_generation ?? 0) > 0, 'every replica READY and routed');
  return { handle, first };
}

/** Start the service, wait for it whole, roll it under load; the run is left running (the bad revision follows on it). */
async function rollUnderLoad(bench: Bench, name: string, coherence: 'revision' | 'independent'): Promise<RolloutResult> {
  const v1 = service(name, bench.script, coherence, 'v1');
  const v2 = service(name, bench.script, coherence, 'v2', coherence === 'revision' ? { rollout: COHERENT_ROLLOUT } : {});
  const [old, next] = [v1.service?.revision ?? '?', v2.service?.revision ?? '?'];
  const { handle, first } = await startService(bench, name, v1);
  const oldIds = live(first).map((j) => j.instance?.instance_id);
  process.stdout.write(`  ${coherence}: ${name} up (5 replicas READY); ${RATE} rps for ${SECONDS} s, the deployment at ${DEPLOY_AT_S} s\n`);

  let sentS = Number.NaN;
  let answeredS = Number.NaN;
  let updateAnswer = '';
  const { answers, figures } = await underLoad(bench, name, SECONDS, DEPLOY_AT_S, async (at) => {
    sentS = at();
    updateAnswer = await handle.executeUpdate(applyServiceUpdate, { args: [{ plan: v2 }] }).then((r) => JSON.stringify(r), (err: unknown) => `refused: ${failureText(err)}`);
    answeredS = at();
  });
  const after = await waitFor(bench, name, (s) => s.service?.deployment === 1 && allReady(s), 'deployment 1 whole');
  const served = (hash: string) => answers.filter((a) => a.ok && a.chain?.router === hash).map((a) => a.sent_s);
  const newAnswers = served(next);
  const oldAnswers = served(old);
  return {
    coherence,
    load: figures,
    revisions: { old, new: next },
    update_sent_s: sentS,
    update_answered_s: answeredS,
    rollout_s: answeredS - sentS,
    update_answer: updateAnswer,
    new_first_answer_s: newAnswers.length > 0 ? Math.min(...newAnswers) : null,
    old_last_answer_s: oldAnswers.length > 0 ? Math.max(...oldAnswers) : null,
    per_second: perSecond(answers, SECONDS, new Map([[old, `old revision ${short(old)}`], [next, `new revision ${short(next)}`]])),
    old_replicas_left: live(after).filter((j) => oldIds.includes(j.instance?.instance_id)).length,
    restarts: after.jobs.reduce((n, j) => n + j.restarts, 0),
    leftovers: null,
  };
}

/** A revision whose decode cannot start (`exit 1`), applied under load to the coherent run: rolled back. */
async function badRevision(bench: Bench, name: string, good: string): Promise<BadRevisionResult> {
  const handle = bench.temporal.client.workflow.getHandle(runWorkflowId(name));
  const before = await waitFor(bench, name, allReady, 'every replica READY');
  const serving = live(before).map((j) => `${j.job_num}:${j.instance?.instance_id}`);
  const restartsBefore = before.jobs.reduce((n, j) => n + j.restarts, 0);
  process.stdout.write(`  bad revision: decode \`exit 1\` applied to ${name} at ${BAD_DEPLOY_AT_S} s of ${RATE} rps for ${BAD_SECONDS} s\n`);
  let elapsed = Number.NaN;
  let updateAnswer = '';
  let rolledBack = false;
  const { answers, figures } = await underLoad(bench, name, BAD_SECONDS, BAD_DEPLOY_AT_S, async () => {
    const t0 = performance.now();
    updateAnswer = await handle.executeUpdate(applyServiceUpdate, { args: [{ plan: service(name, bench.script, 'revision', 'v3', { decode: 'exit 1' }) }] }).then(
      (r) => `answered: ${JSON.stringify(r)}`,
      (err: unknown) => failureText(err),
    );
    elapsed = (performance.now() - t0) / 1000;
    rolledBack = / rolled back: /.test(updateAnswer);
  });
  const back = await waitFor(bench, name, allReady, 'every replica READY after the rollback');
  const now = live(back).map((j) => `${j.job_num}:${j.instance?.instance_id}`);
  return {
    load: figures,
    apply_to_rollback_s: elapsed,
    update_answer: updateAnswer,
    rolled_back: rolledBack,
    serving_replaced: serving.filter((s) => !now.includes(s)).length,
    restarts: back.jobs.reduce((n, j) => n + j.restarts, 0) - restartsBefore,
    new_revision_answers: answers.filter((a) => a.ok && a.chain && a.chain.router !== good).length,
  };
}

const FINAL_STATUSES: readonly string[] = ['TERMINATED', 'ABORTED', 'FAILED', 'DONE'];
/** A job's machine: its rank, attempt and instance (a rank a resize reused has a new attempt). */
const machineOf = (j: RunState['jobs'][number]) => `${j.job_num}:${j.attempt}:${j.instance?.instance_id ?? '-'}`;

/**
 * The canary's bad revision, applied under load to the coherent run: decode answers 20 % errors,
 * 20 % of new requests go to it, its gate fails, it is rolled back. Meanwhile the run's state is read
 * every POLL_MS for the rollout's phase and the canary's replicas.
 */
async function canaryRevision(bench: Bench, name: string): Promise<CanaryResult> {
  const handle = bench.temporal.client.workflow.getHandle(runWorkflowId(name));
  const load = [loadAverage()];
  const before = await waitFor(bench, name, allReady, 'every replica READY');
  const serving = live(before).map((j) => `${j.job_num}:${j.instance?.instance_id}`);
  const known = new Set(before.jobs.map(machineOf));
  const restartsBefore = before.jobs.reduce((n, j) => n + j.restarts, 0);
  const deploymentBefore = before.service?.deployment ?? 0;
  process.stdout.write(`  canary: decode \`--error-rate 0.2\`, \`canary: {traffic: 20, soak: 10s}\`, applied to ${name} at ${CANARY_DEPLOY_AT_S} s of ${RATE} rps for ${CANARY_SECONDS} s\n`);

  let sentS = Number.NaN;
  let answeredS = Number.NaN;
  let updateAnswer = '';
  let wallAtZero = Number.NaN;
  let revisions = { old: Number.NaN, new: Number.NaN };
  let gate: string | null = null;
  const seen: { canary: Seen | null; gate: Seen | null; stopped: Seen | null } = { canary: null, gate: null, stopped: null };
  let lastState = before;
  const { answers, figures } = await underLoad(bench, name, CANARY_SECONDS, CANARY_DEPLOY_AT_S, async (at) => {
    wallAtZero = Date.now() - at() * 1000;
    sentS = at();
    const plan = service(name, bench.script, 'revision', 'v4', { decodeFlags: CANARY_DECODE_FLAGS, rollout: [CANARY_ROLLOUT] });
    const update = handle.executeUpdate(applyServiceUpdate, { args: [{ plan }] }).then(
      (r) => `answered: ${JSON.stringify(r)}`,
      (err: unknown) => failureText(err),
    );
    let answered = false;
    void update.then(() => {
      answeredS = at();
      answered = true;
    });
    // Each poll: the send time of the last one that did not see a change, the answer time of the first that did.
    let pollSent = at();
    const deadline = Date.now() + WAIT_LIMIT_MS;
    // Until the Update answered and the canary's replicas are seen gone (or 20 s past its answer).
    while (!(answered && (seen.stopped || at() > answeredS + 20)) && Date.now() < deadline) {
      const sent = at();
      const state = await stateOf(bench, name);
      const got = at();
      lastState = state;
      const rollout = state.service?.rollout;
      if (rollout && rollout.deployment > deploymentBefore) {
        revisions = { old: rollout.from ?? Number.NaN, new: rollout.revision };
        gate = rollout.canary?.gate ?? gate;
        if (!seen.canary && ['canary', 'rolling-back', 'shifting', 'retiring', 'over'].includes(rollout.phase)) seen.canary = { before_s: pollSent, by_s: got };
        if (!seen.gate && (rollout.phase === 'rolling-back' || (rollout.phase === 'over' && rollout.error !== null))) seen.gate = { before_s: pollSent, by_s: got };
      }
      const fresh = state.jobs.filter((j) => !known.has(machineOf(j)));
      if (seen.gate && !seen.stopped && fresh.length > 0 && fresh.every((j) => FINAL_STATUSES.includes(j.status) || j.finished_at !== null)) seen.stopped = { before_s: pollSent, by_s: got };
      pollSent = sent;
      await sleep(POLL_MS);
    }
    updateAnswer = await update;
  });
  const back = await waitFor(bench, name, (s) => allReady(s) && s.service?.rollout?.phase === 'over', 'every replica READY after the rollback');
  load.push(loadAverage());
  const now = live(back).map((j) => `${j.job_num}:${j.instance?.instance_id}`);
  const fresh = lastState.jobs.filter((j) => !known.has(machineOf(j)));
  const finished = fresh.flatMap((j) => (j.finished_at ? [(Date.parse(j.finished_at) - wallAtZero) / 1000] : []));
  const byGroup: Record<string, number> = {};
  for (const j of fresh) {
    if (j.finished_at === null || seen.gate === null) continue;
    const t = (Date.parse(j.finished_at) - wallAtZero) / 1000 - seen.gate.before_s;
    byGroup[j.group_name] = Math.max(byGroup[j.group_name] ?? Number.NEGATIVE_INFINITY, t);
  }

  const header = (a: Answer) => (a.header === null ? null : Number(a.header));
  const toNew = answers.filter((a) => header(a) === revisions.new);
  const gateAt = seen.gate?.before_s ?? null;
  const firstNew = toNew.length > 0 ? Math.min(...toNew.map((a) => a.sent_s)) : null;
  const lastNew = toNew.length > 0 ? Math.max(...toNew.map((a) => a.sent_s)) : null;
  const lastNewDone = toNew.length > 0 ? Math.max(...toNew.map((a) => a.done_s ?? Number.POSITIVE_INFINITY)) : null;
  const inShare = firstNew !== null && gateAt !== null ? answers.filter((a) => a.sent_s >= firstNew && a.sent_s <= gateAt) : [];
  const failed = answers.filter((a) => !a.ok);
  const failedNew = failed.filter((a) => header(a) === revisions.new);
  const after = (x: number | null) => (x === null || gateAt === null ? null : x - gateAt);
  const labels = new Map<string, string>([
    [String(revisions.old), `old revision (${revisions.old})`],
    [String(revisions.new), `canary (${revisions.new})`],
  ]);
  const perSecondByHeader: Record<string, number[]> = {};
  for (const name of [...labels.values(), 'failed']) perSecondByHeader[name] = Array<number>(CANARY_SECONDS).fill(0);
  for (const a of answers) {
    const row = perSecondByHeader[a.ok ? (labels.get(a.header ?? '') ?? 'failed') : 'failed'];
    const second = Math.floor(a.sent_s);
    if (row && second >= 0 && second < CANARY_SECONDS) row[second] = (row[second] ?? 0) + 1;
  }
  return {
    date: new Date().toISOString(),
    load_average: load,
    rate: RATE,
    seconds: CANARY_SECONDS,
    deploy_at_s: CANARY_DEPLOY_AT_S,
    poll_ms: POLL_MS,
    load: figures,
    revisions,
    update_sent_s: sentS,
    update_answered_s: answeredS,
    update_answer: updateAnswer,
    rolled_back_by_gate: /rolled back: the canary's gate failed: /.test(updateAnswer),
    gate,
    canary_phase: seen.canary,
    gate_failed: seen.gate,
    new_stopped: seen.stopped,
    new_last_finished_s: finished.length === fresh.length && finished.length > 0 ? Math.max(...finished) : null,
    new_finished_by_group: byGroup,
    new_requests: toNew.length,
    new_first_sent_s: firstNew,
    new_last_sent_s: lastNew,
    new_last_done_s: lastNewDone,
    new_share_percent: inShare.length > 0 ? (100 * inShare.filter((a) => header(a) === revisions.new).length) / inShare.length : null,
    traffic_back_s: after(lastNew),
    traffic_back_answered_s: after(lastNewDone),
    new_stopped_after_gate_s: after(seen.stopped?.by_s ?? null),
    update_answered_after_gate_s: after(Number.isFinite(answeredS) ? answeredS : null),
    failed_by_revision: { new: failedNew.length, old: failed.filter((a) => header(a) === revisions.old).length, none: failed.filter((a) => header(a) === null).length },
    failed_outside_window: failed.filter((a) => header(a) !== revisions.new || firstNew === null || lastNew === null || a.sent_s < firstNew || a.sent_s > lastNew).length,
    failed_after_gate: gateAt === null ? failedNew.length : failedNew.filter((a) => a.sent_s > gateAt).length,
    serving_replaced: serving.filter((s) => !now.includes(s)).length,
    restarts: back.jobs.reduce((n, j) => n + j.restarts, 0) - restartsBefore,
    per_second: perSecondByHeader,
    leftovers: null,
  };
}

const row = (cells: string[]) => process.stdout.write(`${cells.map((c, i) => (i === 0 ? c.padEnd(40) : c.padStart(22))).join(' ')}\n`);
const verdict = (holds: boolean) => (holds ? 'holds' : 'MISSED');

function print(r: Results): void {
  const [c, d] = [r.revision, r.independent];
  process.stdout.write(`\nrollout of router 1 / prefill 2 / decode 2 under ${r.rate} rps for ${r.seconds} s, every group's commands changed at ${r.deploy_at_s} s\n`);
  row(['', 'coherence: revision', 'independent (dstack)', 'anchor (issue 28)', '']);
  row(['requests sent', fmt(c.load.sent), fmt(d.load.sent), `≥ ${fmt(ANCHOR.minRequests)}`, verdict(c.load.sent >= ANCHOR.minRequests)]);
  row(['failed', fmt(c.load.failed), fmt(d.load.failed), String(ANCHOR.failed), verdict(c.load.failed === ANCHOR.failed)]);
  row(['mixed-revision chains', fmt(c.load.mixed), fmt(d.load.mixed), String(ANCHOR.mixed), verdict(c.load.mixed === ANCHOR.mixed)]);
  row(['rollout: Update sent → answered', secs(c.rollout_s), secs(d.rollout_s), `≤ ${ANCHOR.rolloutS} s`, verdict(c.rollout_s <= ANCHOR.rolloutS)]);
  row(['  first whole-new chain (from sent)', secs(c.new_first_answer_s === null ? null : c.new_first_answer_s - c.update_sent_s), secs(d.new_first_answer_s === null ? null : d.new_first_answer_s - d.update_sent_s), '', '']);
  row(['  last whole-old chain (from sent)', secs(c.old_last_answer_s === null ? null : c.old_last_answer_s - c.update_sent_s), secs(d.old_last_answer_s === null ? null : d.old_last_answer_s - d.update_sent_s), '', '']);
  row(['latency p50 / p99 (from scheduled send)', `${fmt(c.load.p50_ms)} / ${fmt(c.load.p99_ms)} ms`, `${fmt(d.load.p50_ms)} / ${fmt(d.load.p99_ms)} ms`, '', '']);
  row(['load generator lag, max', `${fmt(c.load.max_lag_ms)} ms`, `${fmt(d.load.max_lag_ms)} ms`, '', '']);
  row(['old replicas left, restarts', `${c.old_replicas_left}, ${c.restarts}`, `${d.old_replicas_left}, ${d.restarts}`, '0, 0', '']);
  for (const x of [c, d]) {
    if (x.load.first_errors.length > 0) process.stdout.write(`  ${x.coherence}: first errors: ${x.load.first_errors.join('; ')}\n`);
    process.stdout.write(`  ${x.coherence}: the Update's answer: ${x.update_answer}\n`);
  }

  const b = r.bad_revision;
  if (b) {
    process.stdout.write(`\nbad revision: a decode that cannot start (exit 1), applied at ${BAD_DEPLOY_AT_S} s of ${r.rate} rps for ${BAD_SECONDS} s\n`);
    row(['', 'measured', '', 'anchor', '']);
    row(['requests sent', fmt(b.load.sent), '', '', '']);
    row(['failed', fmt(b.load.failed), '', '0', verdict(b.load.failed === 0)]);
    row(['mixed-revision chains', fmt(b.load.mixed), '', '0', verdict(b.load.mixed === 0)]);
    row(['apply → the Update\'s rollback answer', secs(b.apply_to_rollback_s), '', '', b.rolled_back ? 'rolled back' : 'NOT rolled back']);
    row(['answers by the bad revision', fmt(b.new_revision_answers), '', '0', verdict(b.new_revision_answers === 0)]);
    row(['serving replicas replaced, restarted', `${b.serving_replaced}, ${b.restarts}`, '', '0, 0 (never)', verdict(b.serving_replaced === 0 && b.restarts === 0)]);
    if (b.load.first_errors.length > 0) process.stdout.write(`  first errors: ${b.load.first_errors.join('; ')}\n`);
    process.stdout.write(`  the Update's answer: ${b.update_answer}\n`);
  }
  if (r.canary) printCanary(r.canary);
}

function printCanary(k: CanaryResult): void {
  const from = (x: number | null) => (x === null ? 'n/a' : `${x.toFixed(2)} s`);
  const seenAt = (x: Seen | null) => (x === null ? 'not seen' : `${x.before_s.toFixed(2)}–${x.by_s.toFixed(2)} s`);
  process.stdout.write(
    `\ncanary's bad revision: decode \`--error-rate 0.2\`, \`canary: {traffic: 20, soak: 10s}\`, applied at ${k.deploy_at_s} s of ${k.rate} rps for ${k.seconds} s (revision ${k.revisions.new} beside ${k.revisions.old}; run state read every ${k.poll_ms} ms)\n`,
  );
  row(['', 'measured', '', 'anchor (issue 28)', '']);
  row(['requests sent; to the canary', `${fmt(k.load.sent)}; ${fmt(k.new_requests)}`, '', '', '']);
  row(['  the canary\'s share until the gate', k.new_share_percent === null ? 'n/a' : `${k.new_share_percent.toFixed(1)} %`, '', '20 %', '']);
  row(['apply → the canary\'s first request', from(k.new_first_sent_s === null ? null : k.new_first_sent_s - k.update_sent_s), '', '', '']);
  row(['the gate failed (seen, from the load start)', seenAt(k.gate_failed), '', '', k.rolled_back_by_gate ? 'rolled back by the gate' : 'NOT rolled back by the gate']);
  row(['traffic back: the canary\'s last request sent', from(k.traffic_back_s), '', `≤ ${CANARY_ANCHOR.traffic_back_s} s`, verdict(k.traffic_back_s !== null && k.traffic_back_s <= CANARY_ANCHOR.traffic_back_s)]);
  row(['  its answer complete', from(k.traffic_back_answered_s), '', '', '']);
  row(['the canary stopped: no replica left', from(k.new_stopped_after_gate_s), '', `≤ ${CANARY_ANCHOR.new_stopped_s} s`, verdict(k.new_stopped_after_gate_s !== null && k.new_stopped_after_gate_s <= CANARY_ANCHOR.new_stopped_s)]);
  row(['  its replicas\' last finished_at', from(k.new_last_finished_s === null || k.gate_failed === null ? null : k.new_last_finished_s - k.gate_failed.before_s), '', '', '']);
  const groups = Object.entries(k.new_finished_by_group ?? {}).sort(([, a], [, b]) => a - b);
  row(['  by group, in the order stopped', groups.map(([g, t]) => `${g} ${t.toFixed(2)}`).join(', ') || 'n/a', '', '', '']);
  row(['  the Update\'s answer', from(k.update_answered_after_gate_s), '', '', '']);
  row(['failed: canary / old / no answer', `${k.failed_by_revision.new} / ${k.failed_by_revision.old} / ${k.failed_by_revision.none}`, '', 'canary\'s only', verdict(k.failed_by_revision.old === 0 && k.failed_by_revision.none === 0)]);
  row(['  outside the canary\'s window; after the gate', `${k.failed_outside_window}; ${k.failed_after_gate}`, '', '0', verdict(k.failed_outside_window === 0)]);
  row(['mixed-revision chains', fmt(k.load.mixed), '', '0', verdict(k.load.mixed === 0)]);
  row(['serving replicas replaced, restarted', `${k.serving_replaced}, ${k.restarts}`, '', '0, 0 (never)', verdict(k.serving_replaced === 0 && k.restarts === 0)]);
  process.stdout.write(`  (times after the gate are from the last poll that did not see it: upper bounds; the canary phase seen ${seenAt(k.canary_phase)})\n`);
  process.stdout.write(`  the gate's verdict: ${k.gate ?? 'none'}\n  the Update's answer: ${k.update_answer}\n`);
}

async function plot(r: Results): Promise<void> {
  const chart = (x: RolloutResult) => {
    // The same four series in the same order in both charts, so each keeps its colour.
    const names = [`old revision ${short(x.revisions.old)}`, `new revision ${short(x.revisions.new)}`, 'mixed chain', 'failed'];
    const series: Series[] = names.map((name) => ({ name, points: Array.from({ length: r.seconds }, (_, s): [number, number] => [s, x.per_second[name]?.[s] ?? 0]) }));
    return lineChart({
      title: `coherence: ${x.coherence === 'revision' ? 'revision (Troupe)' : 'independent (dstack rolling)'}`,
      subtitle: `${fmt(x.load.sent)} requests at ${r.rate} rps: ${fmt(x.load.failed)} failed, ${fmt(x.load.mixed)} mixed-revision chains; Update sent at ${secs(x.update_sent_s)}, answered at ${secs(x.update_answered_s)}`,
      xLabel: 'seconds into the load (by send time)',
      yLabel: 'requests per second, by the revision that served them',
      series,
      references: [{ label: `${r.rate} rps offered`, value: r.rate }],
      height: 420,
    });
  };
  const canaryChart = (k: CanaryResult) =>
    lineChart({
      title: `the canary's bad revision: decode failing 20 %, canary: {traffic: 20, soak: 10s}`,
      subtitle: `${fmt(k.load.sent)} requests at ${k.rate} rps: ${fmt(k.load.failed)} failed (all the canary's: ${k.failed_by_revision.new}); applied at ${secs(k.update_sent_s)}, the gate failed by ${secs(k.gate_failed?.by_s ?? null)}, the canary's last request at ${secs(k.new_last_sent_s)}`,
      xLabel: 'seconds into the load (by send time)',
      yLabel: 'requests per second, by the revision whose pool took them',
      series: Object.entries(k.per_second).map(([name, counts]) => ({ name, points: counts.map((n, s): [number, number] => [s, n]) })),
      references: [{ label: `${k.rate} rps offered`, value: k.rate }],
      height: 420,
    });
  const path = join(resultsDir(), 'rollout.png');
  await writePng(path, stackVertically([chart(r.revision), chart(r.independent), ...(r.canary ? [canaryChart(r.canary)] : [])]));
  process.stdout.write(`rollout: wrote ${path}\n`);
}

/** The bench's scenarios, or with `canaryOnly` the canary alone on a coherent run of its own (the others null). */
async function measure(canaryOnly: boolean): Promise<Omit<Results, 'revision' | 'independent'> & { revision: RolloutResult | null; independent: RolloutResult | null }> {
  const bench = await startStandInServiceBench('rollout');
  const { temporal, script } = bench;
  const names = { revision: `roll-coh-${randomBytes(3).toString('hex')}`, independent: `roll-ind-${randomBytes(3).toString('hex')}`, canary: `roll-can-${randomBytes(3).toString('hex')}` };
  const load = [loadAverage()];
  try {
    process.stdout.write(`rollout bench: ${new Date().toISOString()}, node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), load average ${load[0]}; Temporal: ${temporal.kind}\n`);

    const base = { date: new Date().toISOString(), machine: `${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), node ${process.version}`, rate: RATE, seconds: SECONDS, deploy_at_s: DEPLOY_AT_S };
    if (canaryOnly) {
      await startService(bench, names.canary, service(names.canary, script, 'revision', 'v1'));
      process.stdout.write(`  canary alone: ${names.canary} up (5 replicas READY)\n`);
      const canary = await canaryRevision(bench, names.canary);
      canary.leftovers = await stopStandInRun(bench, names.canary);
      return { ...base, load_average: [...load, loadAverage()], revision: null, independent: null, bad_revision: null, canary };
    }

    const revision = await rollUnderLoad(bench, names.revision, 'revision');
    load.push(loadAverage());
    const bad = await badRevision(bench, names.revision, revision.revisions.new);
    load.push(loadAverage());
    const canary = await canaryRevision(bench, names.revision);
    load.push(loadAverage());
    revision.leftovers = await stopStandInRun(bench, names.revision);
    canary.leftovers = revision.leftovers;

    const independent = await rollUnderLoad(bench, names.independent, 'independent');
    load.push(loadAverage());
    independent.leftovers = await stopStandInRun(bench, names.independent);
    return { ...base, load_average: load, revision, independent, bad_revision: bad, canary };
  } finally {
    await bench.close(Object.values(names));
  }
}

const jsonPath = join(resultsDir(), 'rollout.json');
if (process.env.BENCH_PLOT_ONLY === '1') {
  const saved = JSON.parse(readFileSync(jsonPath, 'utf8')) as Results;
  print(saved);
  await plot(saved);
} else if (process.getuid?.() !== 0) {
  process.stdout.write('rollout: NOT measured: the local fleet\'s network namespaces need root\n');
} else {
  const only = process.env.BENCH_ROLLOUT_ONLY;
  if (only !== undefined && only !== 'canary') throw new Error(`BENCH_ROLLOUT_ONLY=${only}: only \`canary\` is a scenario the bench runs alone`);
  const measured = await measure(only === 'canary');
  // The canary alone: its figures beside the saved figures of the other scenarios.
  const results: Results =
    measured.revision && measured.independent ? { ...measured, revision: measured.revision, independent: measured.independent } : { ...(JSON.parse(readFileSync(jsonPath, 'utf8')) as Results), canary: measured.canary };
  writeFileSync(jsonPath, `${JSON.stringify(results, null, 2)}\n`);
  print(results);
  process.stdout.write(`rollout: wrote ${jsonPath}\n`);
  await plot(results);
}
