/**
 * A service that sizes itself, on the LOCAL fleet (network namespaces, real processes, as root): the
 * stand-in PD service (examples/services/stand-in-model.py), router 1 / prefill 2 / decode `1..3` with
 * `scaling: {metric: rps, target: 20, window: 30s, scale_up_delay: 0s, scale_down_delay: 5s,
 * replica_metrics: …}` — decode sized on its own figures, its replicas' counters (the probes' one chat
 * completion a second through the router counts there too) —, behind
 * a gateway in this process, served by a worker process with the real local fleet, on its own
 * Temporal dev server. An open loop through the gateway (127.0.0.1 only) whose rate changes; latency
 * from each request's scheduled send time. The run's state is read every POLL_MS; each answer says
 * which decode replica served it (`troupe.decode.replica`). Prints, beside issue 28's anchors, and
 * asserts nothing:
 *   - the load step: 10 rps for 40 s, 60 rps for 60 s, then 0.5 rps until decode is back to 1. From
 *     the step: each grow decision (a new decode job in the state, and its submitted_at), the new
 *     replica READY and its first answer; when the 30 s average of the bench's own send log crossed
 *     20 and 40 rps (2 and 3 replicas wanted) and each decision's lag after it; failed requests. After
 *     the load falls: when the average fell below 40 and 20, when each shrink showed (the gateways'
 *     table without the replica: its last request; the job removed), and the lag after the crossing
 *     and after the size's scale_down_delay;
 *   - in the middle of a rollout (`rollout: {coherence: revision, steps: 2}`, every group's commands
 *     changed): a `scaleGroup` of prefill 2 → 3 (prefill `2..3`, with a target no load here reaches)
 *     and a load spike from 10 to 60 rps, both sent once the rollout is seen under way: failed
 *     requests, mixed-revision chains, whether prefill ended at 3 replicas of the new revision and
 *     decode grew (and whether its growth came before the rollout was over), the rollout's time.
 *   - scale from zero: one group of the stand-in (`replicas: 0..2`, `scaling: {metric: rps, target: 10,
 *     window: 30s, scale_down_delay: 1s}`, loading for 1 s), ZERO.trials times: once it is back at zero,
 *     ZERO.burst requests at once through the gateway, which holds them; from their send: the wake
 *     decision (the new job's submitted_at), its commands running, READY, and the answers; the replica's
 *     own start (running → READY, the stand-in loading and its first probe) beside the rest, which is
 *     Troupe's: the anchor is answered ≤ that start + 3 s. Failed requests.
 * Writes bench/results/autoscale.json.
 *
 *   npx tsx bench/autoscale.ts            every scenario (~7 min)
 *   BENCH_AUTOSCALE_ONLY=step|rollout|zero npx tsx bench/autoscale.ts   one of them
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { REVISION_HEADER } from '../src/gateway/data-plane';
import { loadServicePlan, serviceRunPlan } from '../src/plan';
import { runWorkflowId } from '../src/contract/ids';
import { applyServiceUpdate, runStateQuery, scaleGroupUpdate } from '../src/contract/messages';
import type { JobState, RunState } from '../src/contract/run-state';
import type { Plan } from '../src/plan/plan-schema';
import type { Leftovers } from '../test/helpers/leftovers';
import { standInPdServiceYaml, standInZeroServiceYaml, type StandInMark } from '../test/helpers/stand-in-service';
import { loadAverage } from './harness/cpu';
import { resultsDir } from './harness/results';
import { fmt, percentile } from './harness/stats';
import { startStandInServiceBench, stopStandInRun, type StandInServiceBench } from './harness/stand-in-service-bench';

const POLL_MS = 150;
const REQUEST_TIMEOUT_MS = 20_000;
const WAIT_LIMIT_MS = 180_000;
const SCALING = { target: 20, window_s: 30, scale_up_delay_s: 0, scale_down_delay_s: 5 };
/** decode is sized on its OWN traffic: its replicas' counters of the chat completions they answered (Troupe's `replica_metrics`). */
const DECODE_SCALING = `{metric: rps, target: ${SCALING.target}, window: ${SCALING.window_s}s, scale_up_delay: ${SCALING.scale_up_delay_s}s, scale_down_delay: ${SCALING.scale_down_delay_s}s, replica_metrics: {port: 8000, requests: stand_in_chat_completions_total}}`;
/** Prefill may be resized by hand (`2..3` needs a `scaling`); a target no load here reaches keeps the autoscaler from wanting more than 2. */
const PREFILL_SCALING = '{metric: rps, target: 1000, window: 30s}';
const STEP = { low_rps: 10, low_s: 40, high_rps: 60, high_s: 60, tail_rps: 0.5, tail_limit_s: 120 };
const SPIKE = { base_rps: 10, deploy_at_s: 5, high_rps: 60, high_s: 40 };
/** Issue 28's anchors: the decision ≤ window + 2 s after the step, the new replica serving ≤ 3 s after it, 0 failed. */
const ANCHOR = { decision_s: SCALING.window_s + 2, serving_s: 3, failed: 0, zero_extra_s: 3 };
const ZERO = { trials: 3, burst: 3 };

/** One request: when it left and ended (s from the load's start), and who served it. */
interface Answer {
  sent_s: number;
  done_s: number | null;
  ok: boolean;
  header: string | null;
  chain: { router: string; prefill: StandInMark; decode: StandInMark } | null;
  error: string | null;
}

/** A poll of the run's state: the send time of the query and the time its answer came, s from the load's start. */
interface Poll {
  sent_s: number;
  got_s: number;
  state: RunState;
}

const live = (s: RunState) => s.jobs.filter((j) => !j.removed);
const inGroup = (s: RunState, group: string) => live(s).filter((j) => j.group_name === group);
const keyOf = (j: JobState) => `${j.job_num}:${j.attempt}`;
const failureText = (err: unknown) => (err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err));
const round = (x: number | null) => (x === null || !Number.isFinite(x) ? null : Math.round(x * 100) / 100);

function service(name: string, script: string, label: string, more: Partial<Parameters<typeof standInPdServiceYaml>[0]> = {}): Plan {
  const yaml = standInPdServiceYaml({ name, script, label, coherence: 'revision', decodeReplicas: '1..3', decodeScaling: DECODE_SCALING, ...more });
  return serviceRunPlan(loadServicePlan(yaml, `${name}.yml`, { environ: {} }), null);
}

async function stateOf(bench: StandInServiceBench, name: string): Promise<RunState> {
  return await bench.temporal.client.workflow.getHandle(runWorkflowId(name)).query(runStateQuery);
}

async function waitFor(bench: StandInServiceBench, name: string, check: (s: RunState) => boolean, what: string, limitMs = WAIT_LIMIT_MS): Promise<RunState> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const state = await stateOf(bench, name);
    if (check(state)) return state;
    if (['DONE', 'FAILED', 'TERMINATED'].includes(state.status)) throw new Error(`run ${name} ended ${state.status} waiting for ${what}: ${state.message}`);
    if (Date.now() > deadline) throw new Error(`run ${name}: no ${what} within ${limitMs / 1000} s: ${JSON.stringify(live(state).map((j) => `${j.group_name}:${j.status}`))}`);
    await sleep(POLL_MS);
  }
}

/** The service's run started with `plan`, once every replica is READY and routed. */
async function startService(bench: StandInServiceBench, name: string, plan: Plan, replicas: number) {
  const handle = await bench.temporal.client.workflow.start('RunWorkflow', { taskQueue: bench.taskQueue, workflowId: runWorkflowId(name), args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }] });
  const first = await waitFor(bench, name, (s) => live(s).length === replicas && live(s).every((j) => j.status === 'READY') && (s.service?.table_generation ?? 0) > 0, 'every replica READY and routed');
  return { handle, first };
}

/**
 * An open loop whose rate changes: the requests leave on a schedule (each 1/rate after the one before,
 * a new rate from the moment it is set), whether or not earlier ones have answered, and each latency
 * counts from its scheduled time, as bench/harness/open-loop.ts does for a fixed rate and length; a
 * stepped load needs a rate that changes and an end the bench decides while it runs.
 */
function steppedLoad(bench: StandInServiceBench, name: string, rate0: number) {
  const pool = new Pool(bench.gateway.url, { connections: 256 });
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }] });
  const answers: Answer[] = [];
  const latenciesMs: number[] = [];
  const inFlight = new Set<Promise<void>>();
  const t0 = performance.now();
  const at = () => (performance.now() - t0) / 1000;
  let rate = rate0;
  let next = t0;
  let maxLagMs = 0;
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  const send = async (scheduled: number) => {
    const answer: Answer = { sent_s: (scheduled - t0) / 1000, done_s: null, ok: false, header: null, chain: null, error: null };
    answers.push(answer);
    try {
      const signal = AbortSignal.timeout(Math.max(1, Math.round(REQUEST_TIMEOUT_MS - (performance.now() - scheduled))));
      const res = await pool.request({ path: `/services/${name}/v1/chat/completions`, method: 'POST', headers: { 'content-type': 'application/json' }, body, signal });
      const text = await res.body.text();
      const header = res.headers[REVISION_HEADER];
      answer.header = typeof header === 'string' ? header : null;
      if (res.statusCode !== 200) throw new Error(`${res.statusCode} ${text.trim().slice(0, 200)}`);
      const mark = (JSON.parse(text) as { troupe: StandInMark & { prefill: StandInMark; decode: StandInMark } }).troupe;
      answer.chain = { router: mark.revision, prefill: mark.prefill, decode: mark.decode };
      answer.ok = true;
      latenciesMs.push(performance.now() - scheduled);
    } catch (err) {
      answer.error = err instanceof Error ? err.message : String(err);
    } finally {
      answer.done_s = at();
    }
  };
  const tick = () => {
    const now = performance.now();
    while (!stopped && next <= now) {
      maxLagMs = Math.max(maxLagMs, now - next);
      const p = send(next).finally(() => inFlight.delete(p));
      inFlight.add(p);
      next += 1000 / rate;
    }
    if (!stopped) timer = setTimeout(tick, Math.max(0, next - performance.now()));
  };
  tick();
  return {
    answers,
    at,
    /** From now on, `r` requests a second (the next leaves at once). */
    setRate(r: number) {
      rate = r;
      next = performance.now();
      if (timer) clearTimeout(timer);
      tick();
    },
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await Promise.all([...inFlight]);
      await pool.close();
      const failed = answers.filter((a) => !a.ok);
      const mixed = answers.filter((a) => a.chain && (a.chain.router !== a.chain.prefill.revision || a.chain.router !== a.chain.decode.revision));
      return {
        sent: answers.length,
        failed: failed.length,
        mixed: mixed.length,
        p50_ms: percentile(latenciesMs, 50),
        p99_ms: percentile(latenciesMs, 99),
        max_lag_ms: maxLagMs,
        first_errors: [...new Set(failed.map((a) => a.error ?? '?'))].slice(0, 5),
      };
    },
  };
}
type LoadFigures = Awaited<ReturnType<ReturnType<typeof steppedLoad>['stop']>>;

/** The run's state read every POLL_MS until stopped, each read kept with its times. */
function poller(bench: StandInServiceBench, name: string, at: () => number) {
  const polls: Poll[] = [];
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const sent_s = at();
      const state = await stateOf(bench, name).catch(() => null);
      if (state) polls.push({ sent_s, got_s: at(), state });
      await sleep(POLL_MS);
    }
  })();
  return {
    polls,
    last: () => polls[polls.length - 1]?.state ?? null,
    async stop() {
      stopped = true;
      await loop;
    },
  };
}

/** When the polls first saw `check` hold (from `from_s`): the last poll sent that did not, and the answer of the first that did. */
interface Seen {
  before_s: number;
  by_s: number;
}
function firstSeen(polls: Poll[], check: (s: RunState) => boolean, from_s = 0): Seen | null {
  let before = from_s;
  for (const p of polls) {
    if (p.sent_s < from_s) continue;
    if (check(p.state)) return { before_s: before, by_s: p.got_s };
    before = p.sent_s;
  }
  return null;
}

/**
 * What decode answers besides the bench's requests: the gateway probes the router after READY with the
 * service's probe, a chat completion every second (STAND_IN_PROBE_YAML), which passes one decode; its
 * own counters count it, so its average is the send log's plus this.
 */
const PROBE_RPS = 1;

/** decode's average rate over the window ending at t (requests sent in (t - window, t] ÷ window, from the bench's own send log, plus the probes'). */
function windowAverage(sent: number[], t: number, window_s: number): number {
  let n = 0;
  for (const s of sent) if (s > t - window_s && s <= t) n += 1;
  return n / window_s + PROBE_RPS;
}
/** The first time from `from` (10 ms steps) the window average is past `level` (up: above it; down: below it). */
function crossing(sent: number[], from: number, to: number, level: number, up: boolean): number | null {
  for (let t = from; t <= to; t += 0.01) {
    const avg = windowAverage(sent, t, SCALING.window_s);
    if (up ? avg > level : avg < level) return t;
  }
  return null;
}

interface NewReplica {
  replica: number;
  job_num: number;
  /** In s from the load's start: the job seen in the state, its submitted_at / ready_at (workflow time), READY seen, its first request (sent, answered). */
  seen: Seen | null;
  submitted_s: number | null;
  ready_at_s: number | null;
  ready_seen: Seen | null;
  first_request_sent_s: number | null;
  first_answer_s: number | null;
}

interface Shrink {
  replica: number;
  job_num: number;
  /** The decision as the state shows it: the service's table changed (the gateways' table without it, before its drain) after the crossing that asks for it. */
  table_seen: Seen | null;
  /** Its last request (sent; at 0.5 rps one every 2 s, so only a bound), the job removed (seen; its finished_at), s from the load's start. */
  last_request_s: number | null;
  removed_seen: Seen | null;
  finished_s: number | null;
}

interface StepResult {
  load: LoadFigures;
  step_s: number;
  fall_s: number;
  end_s: number;
  crossed_up: { above_20_s: number | null; above_40_s: number | null };
  crossed_down: { below_40_s: number | null; below_20_s: number | null };
  grown: NewReplica[];
  shrunk: Shrink[];
  /** When decode was first seen at 2 replicas on the way down (its scale_down_delay counts from then). */
  size_two_seen_s: number | null;
  /** Replicas by second (the polls' last decode count in each second), for the record. */
  decode_by_second: number[];
  restarts: number;
  leftovers: Leftovers | null;
}

/** Scenario 1: the load step, its growth, the fall, the shrink. */
async function loadStep(bench: StandInServiceBench, name: string): Promise<StepResult> {
  const { handle, first } = await startService(bench, name, service(name, bench.script, 'v1'), 4);
  const initial = new Set(inGroup(first, 'decode').map(keyOf));
  process.stdout.write(`  step: ${name} up (router 1, prefill 2, decode 1 READY); ${STEP.low_rps} rps for ${STEP.low_s} s, ${STEP.high_rps} rps for ${STEP.high_s} s, then ${STEP.tail_rps} rps until decode is back to 1\n`);
  const load = steppedLoad(bench, name, STEP.low_rps);
  const wallAtZero = Date.now() - load.at() * 1000;
  const poll = poller(bench, name, load.at);
  await sleep(STEP.low_s * 1000);
  const step_s = load.at();
  load.setRate(STEP.high_rps);
  await sleep(STEP.high_s * 1000);
  const fall_s = load.at();
  load.setRate(STEP.tail_rps);
  const deadline = Date.now() + STEP.tail_limit_s * 1000;
  // Back to one decode: at least one grown and every decode but one removed.
  for (;;) {
    await sleep(POLL_MS);
    const s = poll.last();
    const grown = poll.polls.some((p) => inGroup(p.state, 'decode').length > 1);
    if ((s && grown && inGroup(s, 'decode').length === 1) || Date.now() > deadline) break;
  }
  await sleep(2000);
  const end_s = load.at();
  const figures = await load.stop();
  await poll.stop();
  const polls = poll.polls;
  const answers = load.answers;
  const final = await handle.query(runStateQuery);

  const wallS = (iso: string | null) => (iso === null ? null : (Date.parse(iso) - wallAtZero) / 1000);
  const everDecode = new Map<string, JobState>();
  for (const p of polls) for (const j of p.state.jobs) if (j.group_name === 'decode') everDecode.set(keyOf(j), j);
  for (const j of final.jobs) if (j.group_name === 'decode') everDecode.set(keyOf(j), j);
  const added = [...everDecode.values()].filter((j) => !initial.has(keyOf(j)));
  const servedBy = (replica: number, from: number) => answers.filter((a) => a.ok && a.chain?.decode.replica === replica && a.sent_s >= from);
  const grown: NewReplica[] = added.map((j) => {
    const seen = firstSeen(polls, (s) => s.jobs.some((x) => keyOf(x) === keyOf(j)));
    const from = seen?.before_s ?? 0;
    const served = servedBy(j.group_job_index, from);
    return {
      replica: j.group_job_index,
      job_num: j.job_num,
      seen,
      submitted_s: round(wallS(j.submitted_at)),
      ready_at_s: round(wallS(j.ready_at)),
      ready_seen: firstSeen(polls, (s) => s.jobs.some((x) => keyOf(x) === keyOf(j) && x.status === 'READY')),
      first_request_sent_s: served.length > 0 ? Math.min(...served.map((a) => a.sent_s)) : null,
      first_answer_s: served.length > 0 ? Math.min(...served.map((a) => a.done_s ?? Number.POSITIVE_INFINITY)) : null,
    };
  });
  grown.sort((a, b) => (a.seen?.by_s ?? 0) - (b.seen?.by_s ?? 0));
  const sent = answers.map((a) => a.sent_s);
  const below = { below_40_s: crossing(sent, fall_s, end_s, 40, false), below_20_s: crossing(sent, fall_s, end_s, 20, false) };
  const tableAt = (t: number) => [...polls].reverse().find((p) => p.sent_s <= t)?.state.service?.table_generation ?? 0;
  const shrunk: Shrink[] = added
    .filter((j) => final.jobs.find((x) => keyOf(x) === keyOf(j))?.removed ?? true)
    .map((j) => {
      const served = servedBy(j.group_job_index, step_s);
      const gone = final.jobs.find((x) => keyOf(x) === keyOf(j));
      const removed = firstSeen(polls, (s) => s.jobs.some((x) => keyOf(x) === keyOf(j) && x.removed), fall_s);
      // The crossing that asks for this shrink: the last one before it was removed.
      const crossed = [below.below_40_s, below.below_20_s].filter((c): c is number => c !== null && removed !== null && c <= removed.by_s).pop() ?? fall_s;
      const generation = tableAt(crossed);
      return {
        replica: j.group_job_index,
        job_num: j.job_num,
        table_seen: firstSeen(polls, (s) => (s.service?.table_generation ?? 0) > generation, crossed),
        last_request_s: served.length > 0 ? Math.max(...served.map((a) => a.sent_s)) : null,
        removed_seen: removed,
        finished_s: round(wallS(gone?.finished_at ?? null)),
      };
    })
    .sort((a, b) => (a.removed_seen?.by_s ?? 0) - (b.removed_seen?.by_s ?? 0));
  const sizeTwo = firstSeen(polls, (s) => inGroup(s, 'decode').length === 2, fall_s);
  const bySecond: number[] = [];
  for (const p of polls) bySecond[Math.floor(p.sent_s)] = inGroup(p.state, 'decode').length;
  for (let i = 0; i < bySecond.length; i += 1) bySecond[i] ??= bySecond[i - 1] ?? 1;
  return {
    load: figures,
    step_s,
    fall_s,
    end_s,
    crossed_up: { above_20_s: round(crossing(sent, step_s, fall_s, 20, true)), above_40_s: round(crossing(sent, step_s, fall_s, 40, true)) },
    crossed_down: { below_40_s: round(below.below_40_s), below_20_s: round(below.below_20_s) },
    grown,
    shrunk,
    size_two_seen_s: sizeTwo?.by_s ?? null,
    decode_by_second: bySecond,
    restarts: final.jobs.reduce((n, j) => n + j.restarts, 0),
    leftovers: null,
  };
}

interface RolloutSpikeResult {
  load: LoadFigures;
  revisions: { old: string; new: string };
  /** s from the load's start. */
  apply_sent_s: number;
  apply_answered_s: number | null;
  apply_answer: string;
  under_way_seen: Seen | null;
  scale_sent_s: number | null;
  scale_answered_s: number | null;
  scale_answer: string;
  spike_from_s: number | null;
  /** The rollout's phase `over` first seen, and decode's growth first seen (and the phase then). */
  rollout_over_seen: Seen | null;
  decode_grown_seen: Seen | null;
  decode_grown_phase: string | null;
  /** The 30 s average of the send log past 20 and 40 rps (decode 2 and 3 wanted), s from the load's start. */
  crossed_up: { above_20_s: number | null; above_40_s: number | null };
  /** Decode's replicas of the new revision, and the rollout's phase, by second (the polls' last in each second). */
  decode_new_by_second: number[];
  phase_by_second: string[];
  /** At the end: each group's live replicas, how many were started after the apply (the new revision's), and the prefill replicas that answered with the new revision. */
  final: Record<string, { replicas: number; new: number }>;
  prefill_new_answering: number[];
  restarts: number;
  leftovers: Leftovers | null;
}

/** Scenario 2: a rollout, and in its middle a scaleGroup of prefill 2 → 3 and a load spike. */
async function rolloutSpike(bench: StandInServiceBench, name: string): Promise<RolloutSpikeResult> {
  const prefill = { prefillReplicas: '2..3', prefillScaling: PREFILL_SCALING, rollout: ['  steps: 2'] };
  const v1 = service(name, bench.script, 'v1', prefill);
  const v2 = service(name, bench.script, 'v2', prefill);
  const revisions = { old: v1.service?.revision ?? '?', new: v2.service?.revision ?? '?' };
  const { handle, first } = await startService(bench, name, v1, 4);
  const before = new Set(first.jobs.map(keyOf));
  process.stdout.write(`  rollout: ${name} up; ${SPIKE.base_rps} rps, the deployment at ${SPIKE.deploy_at_s} s, then (rollout seen under way) scaleGroup prefill 3 and ${SPIKE.high_rps} rps for ${SPIKE.high_s} s\n`);
  const load = steppedLoad(bench, name, SPIKE.base_rps);
  const poll = poller(bench, name, load.at);
  await sleep(SPIKE.deploy_at_s * 1000);
  const apply_sent_s = load.at();
  let apply_answered_s: number | null = null;
  const applied = handle.executeUpdate(applyServiceUpdate, { args: [{ plan: v2 }] }).then(
    (r) => JSON.stringify(r),
    (err: unknown) => `refused: ${failureText(err)}`,
  );
  void applied.then(() => (apply_answered_s = load.at()));
  const underWay = (s: RunState) => (s.service?.rollout?.deployment ?? 0) >= 1 && s.service?.rollout?.phase !== 'over';
  await waitFor(bench, name, underWay, 'the rollout under way', 60_000).catch(() => null);
  const scale_sent_s = load.at();
  let scale_answered_s: number | null = null;
  const scaled = handle.executeUpdate(scaleGroupUpdate, { args: [{ group: 'prefill', nodes: 3 }] }).then(
    (r) => JSON.stringify(r),
    (err: unknown) => `refused: ${failureText(err)}`,
  );
  void scaled.then(() => (scale_answered_s = load.at()));
  const spike_from_s = load.at();
  load.setRate(SPIKE.high_rps);
  await sleep(SPIKE.high_s * 1000);
  const apply_answer = await applied;
  const scale_answer = await scaled;
  const end_s = load.at();
  const figures = await load.stop();
  await poll.stop();
  const settled = await waitFor(bench, name, (s) => s.service?.rollout?.phase === 'over' && live(s).every((j) => j.status === 'READY'), 'the rollout over, every replica READY');
  const polls = poll.polls;
  // The rollout itself starts the new revision's decode beside the old one: growth is a second replica of the new revision.
  const grownSeen = firstSeen(polls, (s) => inGroup(s, 'decode').filter((j) => !before.has(keyOf(j))).length > 1, spike_from_s);
  const grownPoll = grownSeen ? polls.find((p) => p.got_s === grownSeen.by_s) : undefined;
  const final: Record<string, { replicas: number; new: number }> = {};
  for (const g of ['router', 'prefill', 'decode']) {
    const jobs = inGroup(settled, g);
    final[g] = { replicas: jobs.length, new: jobs.filter((j) => !before.has(keyOf(j))).length };
  }
  const done = apply_answered_s as number | null;
  const sentLog = load.answers.map((a) => a.sent_s);
  const newBySecond: number[] = [];
  const phaseBySecond: string[] = [];
  for (const p of polls) {
    newBySecond[Math.floor(p.sent_s)] = inGroup(p.state, 'decode').filter((j) => !before.has(keyOf(j))).length;
    phaseBySecond[Math.floor(p.sent_s)] = (p.state.service?.rollout?.deployment ?? 0) >= 1 ? (p.state.service?.rollout?.phase ?? '-') : '-';
  }
  for (let i = 0; i < newBySecond.length; i += 1) {
    newBySecond[i] ??= newBySecond[i - 1] ?? 0;
    phaseBySecond[i] ??= phaseBySecond[i - 1] ?? '-';
  }
  return {
    load: figures,
    revisions,
    apply_sent_s,
    apply_answered_s: done,
    apply_answer,
    under_way_seen: firstSeen(polls, underWay),
    scale_sent_s,
    scale_answered_s: scale_answered_s as number | null,
    scale_answer,
    spike_from_s,
    rollout_over_seen: firstSeen(polls, (s) => (s.service?.rollout?.deployment ?? 0) >= 1 && s.service?.rollout?.phase === 'over'),
    decode_grown_seen: grownSeen,
    decode_grown_phase: grownPoll?.state.service?.rollout?.phase ?? null,
    crossed_up: { above_20_s: round(crossing(sentLog, spike_from_s, end_s, 20, true)), above_40_s: round(crossing(sentLog, spike_from_s, end_s, 40, true)) },
    decode_new_by_second: newBySecond,
    phase_by_second: phaseBySecond,
    final,
    prefill_new_answering: [...new Set(load.answers.filter((a) => a.ok && a.chain?.prefill.revision === revisions.new).map((a) => a.chain?.prefill.replica ?? -1))].sort((a, b) => a - b),
    restarts: settled.jobs.reduce((n, j) => n + j.restarts, 0),
    leftovers: null,
  };
}

/** One wake from zero: times from the burst's send (s). */
interface ZeroTrial {
  decision_s: number | null;
  running_s: number | null;
  ready_s: number | null;
  answered_s: number[];
  /** The replica's own start: its commands running → READY. */
  replica_start_s: number | null;
  failed: string[];
}

interface ZeroResult {
  trials: ZeroTrial[];
  leftovers?: Leftovers;
}

const isoS = (iso: string | null | undefined, origin: number) => (iso ? (Date.parse(iso) - origin) / 1000 : null);

/** Scale from zero, ZERO.trials times: a burst held by the gateway while the group it wakes starts its first replica. */
async function fromZero(bench: StandInServiceBench, name: string): Promise<ZeroResult> {
  const yaml = standInZeroServiceYaml(name, bench.script, '{metric: rps, target: 10, window: 30s, scale_down_delay: 1s}');
  const plan = serviceRunPlan(loadServicePlan(yaml, `${name}.yml`, { environ: {} }), null);
  await startService(bench, name, plan, 0);
  const trials: ZeroTrial[] = [];
  for (let i = 0; i < ZERO.trials; i++) {
    await waitFor(bench, name, (s) => live(s).length === 0, 'the group back at zero', 120_000);
    const before = new Set((await stateOf(bench, name)).jobs.map(keyOf));
    const origin = Date.now();
    const answers = await Promise.all(
      Array.from({ length: ZERO.burst }, async () => {
        try {
          const res = await fetch(`${bench.gateway.url}/services/${name}/v1/chat/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }] }),
            signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS * 3),
          });
          await res.arrayBuffer();
          return res.status === 200 ? { at: (Date.now() - origin) / 1000, error: null } : { at: null, error: `HTTP ${res.status}` };
        } catch (err) {
          return { at: null, error: failureText(err) };
        }
      }),
    );
    const state = await stateOf(bench, name);
    const job = state.jobs.find((j) => !before.has(keyOf(j)));
    const running = isoS(job?.running_at, origin);
    const ready = isoS(job?.ready_at, origin);
    trials.push({
      decision_s: isoS(job?.submitted_at, origin),
      running_s: running,
      ready_s: ready,
      answered_s: answers.flatMap((a) => (a.at === null ? [] : [round(a.at) ?? 0])),
      replica_start_s: running === null || ready === null ? null : round(ready - running),
      failed: answers.flatMap((a) => (a.error === null ? [] : [a.error])),
    });
  }
  return { trials };
}

function printZero(r: ZeroResult): void {
  process.stdout.write(`
scale from zero: replicas 0..2, ${ZERO.burst} requests at once once it is at zero, ${ZERO.trials} times; times from their send
`);
  row(['', 'measured', 'anchor (issue 28)', '']);
  r.trials.forEach((t, i) => {
    const last = t.answered_s.length > 0 ? Math.max(...t.answered_s) : null;
    const extra = minus(last, t.replica_start_s);
    row([`wake ${i + 1}: decision; running; READY`, `${s2(t.decision_s)}; ${s2(t.running_s)}; ${s2(t.ready_s)}`, '', '']);
    row(['  answered (last); the replica\'s own start', `${s2(last)}; ${s2(t.replica_start_s)}`, '', '']);
    row(['  answered − the replica\'s own start', s2(extra), `≤ ${ANCHOR.zero_extra_s} s`, verdict(extra !== null && extra <= ANCHOR.zero_extra_s && t.failed.length === 0)]);
    row(['  failed of sent', `${t.failed.length} of ${ZERO.burst}`, '0', verdict(t.failed.length === 0)]);
    if (t.failed.length > 0) process.stdout.write(`  errors: ${t.failed.join('; ')}\n`);
  });
}

interface Results {
  date: string;
  machine: string;
  load_average: number[];
  poll_ms: number;
  scaling: typeof SCALING;
  step: StepResult | null;
  rollout: RolloutSpikeResult | null;
  zero: ZeroResult | null;
}

const row = (cells: string[]) => process.stdout.write(`${cells.map((c, i) => (i === 0 ? c.padEnd(46) : c.padStart(20))).join(' ')}\n`);
const verdict = (holds: boolean) => (holds ? 'holds' : 'MISSED');
const s2 = (x: number | null | undefined) => (x === null || x === undefined || !Number.isFinite(x) ? 'n/a' : `${x.toFixed(2)} s`);
const minus = (a: number | null | undefined, b: number | null | undefined) => (a === null || a === undefined || b === null || b === undefined ? null : a - b);

function printStep(r: StepResult): void {
  process.stdout.write(`\nload step: ${STEP.low_rps} → ${STEP.high_rps} rps at ${r.step_s.toFixed(1)} s, down to ${STEP.tail_rps} rps at ${r.fall_s.toFixed(1)} s; decode 1..3, ${DECODE_SCALING}\n`);
  process.stdout.write(`  times from the step (the state seen: before–by the polls, every ${POLL_MS} ms)\n`);
  row(['', 'measured', 'anchor (issue 28)', '']);
  row(['window average > 20 rps (2 wanted)', s2(minus(r.crossed_up.above_20_s, r.step_s)), '', '']);
  row(['window average > 40 rps (3 wanted)', s2(minus(r.crossed_up.above_40_s, r.step_s)), '', '']);
  r.grown.forEach((g, i) => {
    const decided = minus(g.seen?.by_s, r.step_s);
    const crossed = i === 0 ? r.crossed_up.above_20_s : r.crossed_up.above_40_s;
    row([`decode ${g.replica} (${i + 2} wanted): decision seen`, `${s2(minus(g.seen?.before_s, r.step_s))}–${s2(decided)}`, `≤ ${ANCHOR.decision_s} s`, verdict(decided !== null && decided <= ANCHOR.decision_s)]);
    row(['  its submitted_at; after the crossing', `${s2(minus(g.submitted_s, r.step_s))}; ${s2(minus(g.submitted_s, crossed))}`, '', '']);
    row(['  READY (ready_at; seen by)', `${s2(minus(g.ready_at_s, r.step_s))}; ${s2(minus(g.ready_seen?.by_s, r.step_s))}`, '', '']);
    const serving = minus(g.first_answer_s, g.submitted_s);
    row(['  first request sent; answered', `${s2(minus(g.first_request_sent_s, r.step_s))}; ${s2(minus(g.first_answer_s, r.step_s))}`, '', '']);
    row(['  serving: first answer − submitted_at (− seen)', `${s2(serving)} (${s2(minus(g.first_answer_s, g.seen?.by_s))})`, `≤ ${ANCHOR.serving_s} s`, verdict(serving !== null && serving <= ANCHOR.serving_s)]);
    row(['  serving after READY (first sent − ready_at)', s2(minus(g.first_request_sent_s, g.ready_at_s)), '', '']);
  });
  row(['requests sent; failed', `${fmt(r.load.sent)}; ${fmt(r.load.failed)}`, String(ANCHOR.failed), verdict(r.load.failed === ANCHOR.failed)]);
  row(['mixed-revision chains', fmt(r.load.mixed), '0', '']);
  row(['latency p50 / p99 (from scheduled send)', `${fmt(r.load.p50_ms)} / ${fmt(r.load.p99_ms)} ms`, '', '']);
  row(['load generator lag, max', `${fmt(r.load.max_lag_ms)} ms`, '', '']);
  process.stdout.write('  after the load falls, times from the fall\n');
  row(['window average < 40 rps (2 wanted)', s2(minus(r.crossed_down.below_40_s, r.fall_s)), '', '']);
  row(['window average < 20 rps (1 wanted)', s2(minus(r.crossed_down.below_20_s, r.fall_s)), '', '']);
  r.shrunk.forEach((x, i) => {
    const crossed = i === 0 ? r.crossed_down.below_40_s : r.crossed_down.below_20_s;
    row([`decode ${x.replica} out: decision (table without it) seen`, `${s2(minus(x.table_seen?.before_s, r.fall_s))}–${s2(minus(x.table_seen?.by_s, r.fall_s))}`, '', '']);
    row(['  after the crossing (by)', s2(minus(x.table_seen?.by_s, crossed)), '', '']);
    row(['  its last request sent (one every 2 s)', s2(minus(x.last_request_s, r.fall_s)), '', '']);
    row(['  removed seen (finished_at)', `${s2(minus(x.removed_seen?.by_s, r.fall_s))} (${s2(minus(x.finished_s, r.fall_s))})`, '', '']);
  });
  const second = r.shrunk[1];
  if (second) {
    const delayEnd = r.size_two_seen_s === null ? null : Math.max(r.size_two_seen_s + SCALING.scale_down_delay_s, r.crossed_down.below_20_s ?? 0);
    row(['2 → 1: size 2 seen; due (< 20 and size 2 + delay)', `${s2(minus(r.size_two_seen_s, r.fall_s))}; ${s2(minus(delayEnd, r.fall_s))}`, '', '']);
    const decided = second.table_seen?.by_s ?? null;
    row(['  its decision after it was due (by)', s2(minus(decided, delayEnd)), 'after the delay', verdict(decided !== null && r.size_two_seen_s !== null && decided >= r.size_two_seen_s + SCALING.scale_down_delay_s - POLL_MS / 1000)]);
  }
  row(['restarts', String(r.restarts), '0', '']);
  if (r.load.first_errors.length > 0) process.stdout.write(`  first errors: ${r.load.first_errors.join('; ')}\n`);
  process.stdout.write(`  decode replicas by second: ${r.decode_by_second.join('')}\n`);
}

function printRollout(r: RolloutSpikeResult): void {
  process.stdout.write(`\nin the middle of a rollout (coherence: revision, steps: 2; every group's commands changed): scaleGroup prefill 2 → 3 and ${SPIKE.base_rps} → ${SPIKE.high_rps} rps\n`);
  row(['', 'measured', 'anchor (issue 28)', '']);
  row(['rollout: apply sent → answered', s2(minus(r.apply_answered_s, r.apply_sent_s)), '', '']);
  row(['  under way seen; scaleGroup and spike sent', `${s2(minus(r.under_way_seen?.by_s, r.apply_sent_s))}; ${s2(minus(r.scale_sent_s, r.apply_sent_s))}`, '', '']);
  row(['  scaleGroup answered (from apply)', s2(minus(r.scale_answered_s, r.apply_sent_s)), '', '']);
  row(['  decode grown seen (from apply); phase then', `${s2(minus(r.decode_grown_seen?.by_s, r.apply_sent_s))}; ${r.decode_grown_phase ?? 'n/a'}`, 'mid-rollout', '']);
  row(['  phase over seen (from apply)', s2(minus(r.rollout_over_seen?.by_s, r.apply_sent_s)), '', '']);
  row(['  window average > 20 / > 40 rps (from apply)', `${s2(minus(r.crossed_up.above_20_s, r.apply_sent_s))} / ${s2(minus(r.crossed_up.above_40_s, r.apply_sent_s))}`, '', '']);
  const f = r.final;
  row(['prefill at the end: replicas, of the new revision', `${f.prefill?.replicas}, ${f.prefill?.new}`, '3, 3', verdict(f.prefill?.replicas === 3 && f.prefill?.new === 3)]);
  row(['decode at the end: replicas, new', `${f.decode?.replicas}, ${f.decode?.new}`, '> 1', verdict((f.decode?.replicas ?? 0) > 1)]);
  row(['prefill replicas answering on the new revision', r.prefill_new_answering.join(', '), '', '']);
  row(['requests sent; failed', `${fmt(r.load.sent)}; ${fmt(r.load.failed)}`, '0 failed', verdict(r.load.failed === 0)]);
  row(['mixed-revision chains', fmt(r.load.mixed), '0', verdict(r.load.mixed === 0)]);
  row(['latency p50 / p99 (from scheduled send)', `${fmt(r.load.p50_ms)} / ${fmt(r.load.p99_ms)} ms`, '', '']);
  row(['restarts', String(r.restarts), '0', '']);
  if (r.load.first_errors.length > 0) process.stdout.write(`  first errors: ${r.load.first_errors.join('; ')}\n`);
  process.stdout.write(`  the apply's answer: ${r.apply_answer}\n  the scaleGroup's answer: ${r.scale_answer}\n`);
  const start = Math.floor(r.apply_sent_s);
  process.stdout.write(`  from the apply, by second: decode replicas of the new revision ${r.decode_new_by_second.slice(start).join('')}\n`);
  const phases: string[] = [];
  r.phase_by_second.slice(start).forEach((p, i) => {
    if (phases.length === 0 || !phases[phases.length - 1]?.startsWith(`${p} `)) phases.push(`${p} from ${i} s`);
  });
  process.stdout.write(`  the rollout's phase: ${phases.join(', ')}\n`);
}

async function measure(only: string | undefined): Promise<Results> {
  const bench = await startStandInServiceBench('autoscale');
  const names = { step: `auto-step-${randomBytes(3).toString('hex')}`, rollout: `auto-roll-${randomBytes(3).toString('hex')}`, zero: `auto-zero-${randomBytes(3).toString('hex')}` };
  const load = [loadAverage()];
  try {
    process.stdout.write(`autoscale bench: ${new Date().toISOString()}, node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), load average ${load[0]}; Temporal: ${bench.temporal.kind}\n`);
    let step: StepResult | null = null;
    let rollout: RolloutSpikeResult | null = null;
    let zero: ZeroResult | null = null;
    if (only === undefined || only === 'step') {
      step = await loadStep(bench, names.step);
      step.leftovers = await stopStandInRun(bench, names.step);
      load.push(loadAverage());
    }
    if (only === undefined || only === 'rollout') {
      rollout = await rolloutSpike(bench, names.rollout);
      rollout.leftovers = await stopStandInRun(bench, names.rollout);
      load.push(loadAverage());
    }
    if (only === undefined || only === 'zero') {
      zero = await fromZero(bench, names.zero);
      zero.leftovers = await stopStandInRun(bench, names.zero);
      load.push(loadAverage());
    }
    return { date: new Date().toISOString(), machine: `${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), node ${process.version}`, load_average: load, poll_ms: POLL_MS, scaling: SCALING, step, rollout, zero };
  } finally {
    await bench.close(Object.values(names));
  }
}

if (process.getuid?.() !== 0) {
  process.stdout.write('autoscale: NOT measured: the local fleet\'s network namespaces need root\n');
} else {
  const only = process.env.BENCH_AUTOSCALE_ONLY;
  if (only !== undefined && only !== 'step' && only !== 'rollout' && only !== 'zero') throw new Error(`BENCH_AUTOSCALE_ONLY=${only}: the scenarios are \`step\`, \`rollout\` and \`zero\``);
  const measured = await measure(only);
  const path = join(resultsDir(), 'autoscale.json');
  // One scenario run alone keeps the others' last figures in the file, each with its own date.
  const kept = only !== undefined && existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as Partial<Results>) : {};
  const results: Results = { ...kept, ...measured, step: measured.step ?? kept.step ?? null, rollout: measured.rollout ?? kept.rollout ?? null, zero: measured.zero ?? kept.zero ?? null };
  if (only === 'zero') Object.assign(results, { date: kept.date ?? measured.date, load_average: kept.load_average ?? measured.load_average, zero_date: measured.date, zero_load_average: measured.load_average });
  writeFileSync(path, `${JSON.stringify(results, null, 2)}\n`);
  if (results.step) printStep(results.step);
  if (results.rollout) printRollout(results.rollout);
  if (results.zero) printZero(results.zero);
  process.stdout.write(`\nload average ${results.load_average.join(', ')}\nautoscale: wrote ${path}\n`);
}
