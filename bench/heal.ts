/**
 * Groups that heal and scale, beside a whole-run retry, on the LOCAL fleet (network namespaces,
 * real processes, as root) with a real worker in this process: the PD service sample of the e2e
 * test (test/e2e/local-heal-fixtures.ts: a router, stand-in prefill and decode HTTP servers READY
 * once their probe answers 200), three runs:
 *
 * 1. restart: decode `on_failure: restart-node`; its server killed with SIGKILL, N times → the
 *    replacement's READY, while the router and prefill keep their pids (the bench fails if not);
 * 2. scale: decode `nodes: 1..3`; `RunHandle.scaleGroup` 1 → 2 and 2 → 1, N times each;
 * 3. retry: decode without `on_failure`, the run with `retry: {on_events: [error]}` and the
 *    smallest back-off; its server killed, N times → every node READY in the next submission.
 *
 *   npx tsx bench/heal.ts            (BENCH_HEAL_REPS=5 by default)
 *
 * Every time is measured, from the bench's clock at the kill or the request to the run state's
 * timestamps (workflow time on this machine), the run's history (signals, the back-off's timer),
 * the router's hook log (the hook writes its own time) or a GET of the new server from inside its
 * namespace (the stand-in's own start-up and 1 s warm-up, beside its READY). Prints a table,
 * writes bench/results/heal.json. Asserts no timing; fails when a node that should keep running
 * did not, or a run left a process, namespace, lease or user behind.
 */
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalBackend } from '../src/backends/local/local-backend';
import { netnsAvailable } from '../src/backends/local/netns';
import { lookupUser, runUserName } from '../src/backends/local/run-user';
import { TroupeClient } from '../src/client';
import type { GroupPlan, Plan } from '../src/plan/plan-schema';
import { pidAlive } from '../test/helpers/local-fleet';
import { askRouter, serverPidIn, servicePlan } from '../test/e2e/local-heal-fixtures';
import { leftovers } from '../test/helpers/leftovers';
import { runWorkflowId } from '../workflows/ids';
import { runStateQuery, type RunOptionsInput } from '../workflows/messages';
import type { JobState, RunState } from '../workflows/run-state';
import { loadAverage } from './harness/cpu';
import { timersOf, workflowCost } from './harness/history';
import { resultsDir } from './harness/results';
import { fmt, median, percentile } from './harness/stats';
import { startBenchTemporal, startInProcessWorker, type BenchTemporal } from './harness/temporal-env';

const REPS = Number(process.env.BENCH_HEAL_REPS ?? 5);
/** The smallest first back-off: the option takes any positive number, and a workflow timer lasts at least 1 ms. */
const RETRY_BACKOFF_S = 0.001;
const RUN_OPTIONS: RunOptionsInput = { stop_grace_s: 1 };
const WAIT_LIMIT_MS = 120_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const at = (iso: string | null | undefined): number => (iso ? Date.parse(iso) : Number.NaN);

/** One figure: a name and its samples in ms. */
type Series = Record<string, number[]>;

interface Scenario {
  label: string;
  series: Series;
  load: number[];
  notes: string[];
}

/** What the bench needs of its runs: the client, the worker's fleet, and every namespace a run used. */
interface Bench {
  env: BenchTemporal;
  troupe: TroupeClient;
  fleetDir: string;
  sharedDir: string;
  namespacesSeen: Set<string>;
  problems: string[];
}

// ---------------------------------------------------------------- the runs' plan and state

/**
 * The router's `on_peers_change`: when it ran (ms since the epoch), the book's version and the READY
 * decode addresses it read, one line per run of the hook.
 */
function timedHook(logPath: string): string {
  return `python3 -c 'import json,os,time; b=json.load(open(os.environ["TROUPE_PEERS_FILE"])); d=[n["ip"] for g in b["groups"] if g["name"]=="decode" for n in g["nodes"] if n["ready"]]; print(round(time.time()*1000), b["version"], ",".join(d))' >> ${logPath}`;
}

function samplePlan(name: string, decode: Partial<GroupPlan>, hookLog: string): Plan {
  return servicePlan(name, decode, { hookLog, router: { on_peers_change: timedHook(hookLog) } });
}

interface HookLine {
  atMs: number;
  version: number;
  decodeIps: string[];
}

function hookLines(path: string): HookLine[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [ms, version, ips] = line.split(' ');
      return { atMs: Number(ms), version: Number(version), decodeIps: ips ? ips.split(',') : [] };
    });
}

/** When the router's hook first saw decode as `wanted` says, at or after `sinceMs` (NaN if not within 30 s). */
async function routerTold(path: string, sinceMs: number, wanted: (ips: string[]) => boolean): Promise<number> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const line = hookLines(path).find((l) => l.atMs >= sinceMs && wanted(l.decodeIps));
    if (line) return line.atMs;
    if (Date.now() > deadline) return Number.NaN;
    await sleep(100);
  }
}

const netnsOf = (job: JobState | undefined): string => {
  const netns = job?.instance?.details.netns;
  if (!netns) throw new Error(`job ${job?.job_num} has no namespace`);
  return netns;
};
const ipOf = (job: JobState | undefined): string => job?.instance?.internal_ip ?? '';

/** Every node up: the router RUNNING (it has no probe), prefill and decode READY. */
const allUp = (s: RunState) =>
  s.status === 'RUNNING' && s.jobs.filter((j) => !j.removed).every((j) => j.status === 'READY' || (j.group_name === 'router' && j.status === 'RUNNING'));

async function queryState(bench: Bench, name: string): Promise<RunState> {
  const state = await bench.env.client.workflow.getHandle(runWorkflowId(name)).query(runStateQuery);
  for (const job of state.jobs) {
    for (const instance of [job.instance, ...job.previous_attempts.map((a) => a.instance)]) {
      const netns = instance?.details.netns;
      if (netns) bench.namespacesSeen.add(netns);
    }
  }
  return state;
}

/** The run's state once `check` holds (polled every 100 ms). */
async function waitFor(bench: Bench, name: string, check: (s: RunState) => boolean, what: string): Promise<RunState> {
  const deadline = Date.now() + WAIT_LIMIT_MS;
  for (;;) {
    const state = await queryState(bench, name);
    if (check(state)) return state;
    if (['DONE', 'FAILED', 'TERMINATED'].includes(state.status)) throw new Error(`run ${name} ended ${state.status} waiting for ${what}: ${state.message}`);
    if (Date.now() > deadline) throw new Error(`run ${name}: no ${what} within ${WAIT_LIMIT_MS / 1000} s: ${JSON.stringify(state.jobs.map((j) => j.status))}`);
    await sleep(100);
  }
}

/** Until `path` is gone (a released machine's namespace); false if it is still there after 30 s. */
async function gone(path: string): Promise<boolean> {
  const deadline = Date.now() + 30_000;
  while (existsSync(path)) {
    if (Date.now() > deadline) return false;
    await sleep(50);
  }
  return true;
}

/** Polls a node's server from inside its namespace every 20 ms; prints the time of its first 200 (ms since the epoch). */
const FIRST_OK = `import sys, time, urllib.request
while True:
    try:
        if urllib.request.urlopen(f"http://{sys.argv[1]}:8000/", timeout=0.5).status == 200:
            break
    except Exception:
        pass
    time.sleep(0.02)
print(round(time.time() * 1000))`;

/**
 * When the new decode server first answered 200 to a GET from inside its own namespace (as
 * Troupe's probe does; from this namespace a reused address can stay unreachable for seconds
 * while the neighbour cache still holds the old machine's), every 20 ms once `pick` finds its
 * machine in the run's state: the stand-in's own start-up and warm-up, without the probe's lag.
 */
async function serverAnswers(bench: Bench, name: string, pick: (s: RunState) => JobState | undefined): Promise<number> {
  const deadline = Date.now() + WAIT_LIMIT_MS;
  let job = pick(await queryState(bench, name));
  while (!job?.instance) {
    if (Date.now() > deadline) return Number.NaN;
    await sleep(50);
    job = pick(await queryState(bench, name));
  }
  return await new Promise<number>((resolve) => {
    execFile('ip', ['netns', 'exec', netnsOf(job), 'python3', '-c', FIRST_OK, ipOf(job)], { timeout: Math.max(1, deadline - Date.now()) }, (err, stdout) => {
      resolve(err ? Number.NaN : Number(stdout.trim()));
    });
  });
}

/**
 * A request through the router once the new decode node is READY (the router sends it to the last
 * READY decode node of its peers.json): which node answered, or why it failed. Not a timing: a
 * check that the router can use the new node.
 */
async function throughRouter(routerIp: string): Promise<string> {
  try {
    return (await askRouter(routerIp)).decode;
  } catch (err) {
    return `failed: ${err instanceof Error ? err.message : String(err)}`;
  }
}

function routerNote(answers: string[], expected: string, addresses: string[]): string {
  const failed = answers.filter((a) => a !== expected);
  const others = failed.length > 0 ? ` (others: ${[...new Set(failed)].join('; ')})` : '';
  return `a request through the router after each READY was served by the new node in ${answers.length - failed.length} of ${answers.length}${others}; the new node's addresses: ${addresses.join(', ')}`;
}

/** The first `jobEvents` signal the run received at or after `sinceMs`: when a failure reached it. */
function failureReached(signals: number[], sinceMs: number): number {
  return signals.find((t) => t >= sinceMs) ?? Number.NaN;
}

async function jobEventSignals(bench: Bench, name: string): Promise<number[]> {
  const cost = await workflowCost(bench.env.client, runWorkflowId(name));
  return cost.timeline.filter((e) => e.kind === 'workflowExecutionSignaled' && e.name === 'jobEvents').map((e) => e.timeMs);
}

/** The router and prefill servers, which must keep running through a decode restart or resize. */
function keptPids(state: RunState): Array<{ label: string; netns: string; pid: number; jobPid: number | null }> {
  return state.jobs.slice(0, 2).map((job) => ({ label: `${job.group_name}/${job.group_job_index}`, netns: netnsOf(job), pid: serverPidIn(netnsOf(job)), jobPid: job.pid }));
}

function checkKept(kept: ReturnType<typeof keptPids>, state: RunState, when: string): void {
  for (const [i, k] of kept.entries()) {
    const job = state.jobs[i];
    if (!pidAlive(k.pid) || serverPidIn(k.netns) !== k.pid || job?.pid !== k.jobPid || job.attempt !== 0) {
      throw new Error(`${k.label} did not keep running ${when}: server pid ${k.pid} alive ${pidAlive(k.pid)}, job pid ${k.jobPid} → ${job?.pid}, attempt ${job?.attempt}`);
    }
  }
}

// ---------------------------------------------------------------- one run per scenario

/** Submits the run, hands it to `body` once every node is up, and stops it whatever happens. */
async function withRun(bench: Bench, name: string, plan: Plan, options: RunOptionsInput, body: (state: RunState) => Promise<void>): Promise<void> {
  const run = await bench.troupe.submit({ plan, backend: 'local', options });
  try {
    await body(await waitFor(bench, name, allUp, 'every node up'));
  } finally {
    await run.stop().catch((err: unknown) => bench.problems.push(`${name}: stop failed: ${String(err)}`));
    await checkLeftovers(bench, await run.wait());
  }
}

/** What the ended run left on this machine: processes, namespaces of any of its machines, leases, its users. */
async function checkLeftovers(bench: Bench, state: RunState): Promise<void> {
  const left = leftovers(state, bench.fleetDir);
  const users = await Promise.all(Array.from({ length: state.submission + 1 }, (_, s) => lookupUser(runUserName(state.run_uid, s))));
  const namespaces = [...bench.namespacesSeen].filter((n) => existsSync(`/run/netns/${n}`));
  const found = [
    left.processes > 0 ? `${left.processes} processes` : '',
    namespaces.length > 0 ? `namespaces ${namespaces.join(' ')}` : '',
    left.leases + left.instances > 0 ? `${left.leases} leases, ${left.instances} instance records` : '',
    users.some((u) => u !== null) ? `users ${users.flatMap((u) => (u ? [u.name] : [])).join(' ')}` : '',
  ].filter(Boolean);
  if (found.length > 0) bench.problems.push(`${state.run_name}: left behind: ${found.join('; ')}`);
  console.log(`heal: ${state.run_name} ended ${state.status} (${state.termination_reason}); left behind: ${found.length === 0 ? 'nothing' : found.join('; ')}`);
}

async function restartScenario(bench: Bench): Promise<Scenario> {
  const name = `bench-heal-restart-${process.pid}`;
  const hookLog = join(bench.sharedDir, `${name}.hooks`);
  const plan = samplePlan(name, { on_failure: { action: 'restart-node', max_restarts: 1_000, within_s: null } }, hookLog);
  const scenario: Scenario = { label: 'restart-node', series: {}, load: [], notes: [] };
  const add = (key: string, value: number) => (scenario.series[key] ??= []).push(value);
  const kills: number[] = [];
  const routed: string[] = [];
  const addresses: string[] = [];
  await withRun(bench, name, plan, RUN_OPTIONS, async (up) => {
    const kept = keptPids(up);
    let state = up;
    for (let i = 0; i < REPS; i++) {
      scenario.load.push(loadAverage());
      const decode = state.jobs[2];
      const attempt = decode?.attempt ?? 0;
      const victim = serverPidIn(netnsOf(decode));
      const t0 = Date.now();
      process.kill(victim, 'SIGKILL');
      kills.push(t0);
      const answered = await serverAnswers(bench, name, (s) => (s.jobs[2]?.attempt === attempt + 1 ? s.jobs[2] : undefined));
      state = await waitFor(bench, name, (s) => s.jobs[2]?.attempt === attempt + 1 && s.jobs[2].status === 'READY', `decode attempt ${attempt + 1} READY`);
      const replacement = state.jobs[2];
      add("kill → failure in the run's state", at(replacement?.previous_attempts.at(-1)?.finished_at) - t0);
      add('kill → replacement provisioned', at(replacement?.provisioned_at) - t0);
      add('kill → replacement RUNNING', at(replacement?.running_at) - t0);
      add('kill → the new server answers 200 (GET every 20 ms in its namespace)', answered - t0);
      add('kill → replacement READY', at(replacement?.ready_at) - t0);
      add("kill → the router's hook has its address", (await routerTold(hookLog, t0, (ips) => ips.includes(ipOf(replacement)))) - t0);
      routed.push(await throughRouter(ipOf(state.jobs[0])));
      addresses.push(ipOf(replacement));
      checkKept(kept, state, `through restart ${i + 1}`);
      if (!(await gone(`/run/netns/${netnsOf(decode)}`))) bench.problems.push(`${name}: the replaced machine ${netnsOf(decode)} was not released`);
      process.stdout.write('.');
    }
    process.stdout.write('\n');
  });
  // The job's exit as the run's history received it (the state records it once the workflow task runs).
  const signals = await jobEventSignals(bench, name);
  scenario.series = { 'kill → exit signalled to the run': kills.map((t) => failureReached(signals, t) - t), ...scenario.series };
  scenario.notes.push('router and prefill kept their server pids and attempt 0 through every restart');
  scenario.notes.push(routerNote(routed, 'decode/0', addresses));
  return scenario;
}

async function scaleScenario(bench: Bench): Promise<Scenario> {
  const name = `bench-heal-scale-${process.pid}`;
  const hookLog = join(bench.sharedDir, `${name}.hooks`);
  const plan = samplePlan(name, { nodes: 1, nodes_range: { min: 1, max: 3 } }, hookLog);
  const scenario: Scenario = { label: 'scale', series: {}, load: [], notes: [] };
  const add = (key: string, value: number) => (scenario.series[key] ??= []).push(value);
  let releasedAtAnswer = 0;
  const routed: string[] = [];
  const addresses: string[] = [];
  await withRun(bench, name, plan, RUN_OPTIONS, async (up) => {
    const kept = keptPids(up);
    const run = bench.troupe.run(name);
    const first = ipOf(up.jobs[2]);
    let lastInstance: string | undefined;
    for (let i = 0; i < REPS; i++) {
      scenario.load.push(loadAverage());
      const t0 = Date.now();
      const growing = run.scaleGroup('decode', 2).then((result) => ({ result, at: Date.now() }));
      const answered = await serverAnswers(bench, name, (s) => {
        const job = s.jobs[3];
        return job && !job.removed && job.instance?.instance_id !== lastInstance ? job : undefined;
      });
      const { result: grown, at: t1 } = await growing;
      const state = await queryState(bench, name);
      const added = state.jobs[grown.added[0] ?? -1];
      if (grown.nodes !== 2 || !added || added.status !== 'READY') throw new Error(`${name}: 1 → 2 answered ${JSON.stringify(grown)}, the new node ${added?.status}`);
      add('1 → 2: request → answer (new node READY, every node has the book)', t1 - t0);
      add('1 → 2: request → new node provisioned', at(added.provisioned_at) - t0);
      add('1 → 2: request → new node RUNNING', at(added.running_at) - t0);
      add('1 → 2: request → the new server answers 200 (GET every 20 ms in its namespace)', answered - t0);
      add('1 → 2: request → new node READY', at(added.ready_at) - t0);
      lastInstance = added.instance?.instance_id;
      add("1 → 2: request → the router's hook has both", (await routerTold(hookLog, t0, (ips) => ips.includes(ipOf(added)) && ips.includes(first))) - t0);
      routed.push(await throughRouter(ipOf(state.jobs[0])));
      addresses.push(ipOf(added));
      checkKept(kept, state, `through resize ${i + 1} (1 → 2)`);

      const t2 = Date.now();
      const shrunk = await run.scaleGroup('decode', 1);
      const t3 = Date.now();
      if (shrunk.nodes !== 1 || shrunk.removed[0] !== added.job_num) throw new Error(`${name}: 2 → 1 answered ${JSON.stringify(shrunk)}`);
      const removedNetns = `/run/netns/${netnsOf(added)}`;
      if (!existsSync(removedNetns)) releasedAtAnswer += 1;
      add('2 → 1: request → answer (node stopped, machine released)', t3 - t2);
      add("2 → 1: request → the router's hook has one", (await routerTold(hookLog, t2, (ips) => ips.length === 1 && ips[0] === first)) - t2);
      if (!(await gone(removedNetns))) bench.problems.push(`${name}: the removed node's machine ${removedNetns} was not released`);
      checkKept(kept, await queryState(bench, name), `through resize ${i + 1} (2 → 1)`);
      process.stdout.write('.');
    }
    process.stdout.write('\n');
  });
  scenario.notes.push(`the removed node's namespace was gone when 2 → 1 answered in ${releasedAtAnswer} of ${REPS}`);
  scenario.notes.push('router and prefill kept their server pids and attempt 0 through every resize');
  scenario.notes.push(routerNote(routed, 'decode/1', addresses));
  scenario.notes.push('the first 1 → 2 adds rank 3; the later ones take it back as a new attempt (a fresh machine each time)');
  return scenario;
}

async function retryScenario(bench: Bench): Promise<Scenario> {
  const name = `bench-heal-retry-${process.pid}`;
  const hookLog = join(bench.sharedDir, `${name}.hooks`);
  const plan = samplePlan(name, {}, hookLog);
  const options: RunOptionsInput = { ...RUN_OPTIONS, retry_backoff_s: RETRY_BACKOFF_S, retry: { on_events: ['error'], duration_s: 3_600 } };
  const scenario: Scenario = { label: 'retry', series: {}, load: [], notes: [] };
  const add = (key: string, value: number) => (scenario.series[key] ??= []).push(value);
  const kills: number[] = [];
  let restartedToo = 0;
  await withRun(bench, name, plan, options, async (up) => {
    let state = up;
    for (let i = 0; i < REPS; i++) {
      scenario.load.push(loadAverage());
      const before = keptPids(state);
      const submission = state.submission;
      const victim = serverPidIn(netnsOf(state.jobs[2]));
      const t0 = Date.now();
      process.kill(victim, 'SIGKILL');
      kills.push(t0);
      const answered = await serverAnswers(bench, name, (s) => (s.submission === submission + 1 ? s.jobs[2] : undefined));
      state = await waitFor(bench, name, (s) => s.submission === submission + 1 && allUp(s), `submission ${submission + 1} up`);
      const decode = state.jobs[2];
      const latest = (f: (j: JobState) => string | null) => Math.max(...state.jobs.map((j) => at(f(j))));
      add('kill → resubmitted', at(state.jobs[0]?.submitted_at) - t0);
      add('kill → all provisioned', latest((j) => j.provisioned_at) - t0);
      add('kill → decode RUNNING', at(decode?.running_at) - t0);
      add('kill → the new server answers 200 (GET every 20 ms in its namespace)', answered - t0);
      add('kill → decode READY', at(decode?.ready_at) - t0);
      add('kill → every node up (the router RUNNING again, after prefill and decode READY)', latest((j) => j.ready_at ?? j.running_at) - t0);
      if (before.every((k) => !pidAlive(k.pid))) restartedToo += 1;
      process.stdout.write('.');
    }
    process.stdout.write('\n');
  });
  const signals = await jobEventSignals(bench, name);
  const timers = (await timersOf(bench.env.client, runWorkflowId(name))).filter((t) => t.durationMs < 1_000);
  // The only short timer of a run is its back-off (the address deadline's is 600 s).
  const backoffs = kills.map((t) => timers.find((timer) => timer.startedMs >= t));
  scenario.series = {
    'kill → exit signalled to the run': kills.map((t) => failureReached(signals, t) - t),
    'kill → teardown done, back-off starts': backoffs.map((b, i) => (b?.startedMs ?? Number.NaN) - (kills[i] ?? Number.NaN)),
    'back-off timer: started → fired': backoffs.map((b) => (b ? b.firedMs - b.startedMs : Number.NaN)),
    ...scenario.series,
  };
  scenario.notes.push(`back-off durations asked: ${backoffs.map((b) => `${fmt(b?.durationMs ?? Number.NaN)} ms`).join(', ')} (retry_backoff_s ${RETRY_BACKOFF_S}, doubling per resubmission; the default is 5 s)`);
  scenario.notes.push(`router and prefill were stopped and started again (new pids) in ${restartedToo} of ${REPS}`);
  return scenario;
}

// ---------------------------------------------------------------- report

function row(label: string, values: number[]): string {
  const finite = values.filter(Number.isFinite);
  const min = finite.length > 0 ? Math.min(...finite) : Number.NaN;
  const max = finite.length > 0 ? Math.max(...finite) : Number.NaN;
  const missing = values.length - finite.length;
  return `| ${label} | ${fmt(median(values))} | ${fmt(percentile(values, 90))} | ${fmt(min)}–${fmt(max)} | ${finite.length}${missing > 0 ? ` (${missing} not seen)` : ''} |`;
}

function report(scenarios: Scenario[]): string {
  const lines: string[] = [];
  for (const s of scenarios) {
    const load = s.load.filter(Number.isFinite);
    lines.push('', `${s.label}: load average ${fmt(Math.min(...load), 1)}–${fmt(Math.max(...load), 1)} during the ${REPS} repetitions`);
    lines.push('| ms | median | p90 | min–max | n |', '|---|---|---|---|---|');
    for (const [label, values] of Object.entries(s.series)) lines.push(row(label, values));
    for (const note of s.notes) lines.push(`- ${note}`);
  }
  const restart = scenarios.find((s) => s.label === 'restart-node')?.series['kill → replacement READY'] ?? [];
  const retry = scenarios.find((s) => s.label === 'retry')?.series;
  const retryDecode = retry?.['kill → decode READY'] ?? [];
  const retryAll = retry?.['kill → every node up (the router RUNNING again, after prefill and decode READY)'] ?? [];
  if (restart.length > 0 && retryDecode.length > 0) {
    lines.push(
      '',
      `kill → decode READY again (medians): restart-node ${fmt(median(restart))} ms, whole-run retry ${fmt(median(retryDecode))} ms (×${fmt(median(retryDecode) / median(restart), 2)}); ` +
        `every node up again: ${fmt(median(restart))} ms (the others never stopped) against ${fmt(median(retryAll))} ms (×${fmt(median(retryAll) / median(restart), 2)})`,
    );
  }
  return lines.join('\n');
}

// ---------------------------------------------------------------- main

function namespaces(): string[] {
  return existsSync('/run/netns') ? readdirSync('/run/netns') : [];
}

async function main(): Promise<void> {
  if (!(await netnsAvailable())) {
    // The sample's servers all listen on :8000: they need a namespace each.
    console.log('heal: NOT measured: the PD service sample needs root and network namespaces');
    return;
  }
  const namespacesBefore = namespaces();
  const env = await startBenchTemporal('heal');
  const fleetDir = mkdtempSync(join(tmpdir(), 'troupe-bench-heal-fleet-'));
  const sharedDir = mkdtempSync(join(tmpdir(), 'troupe-bench-heal-shared-'));
  // The jobs run as their runs' own users and write the hook logs here.
  chmodSync(sharedDir, 0o1777);
  // A subnet of its own, so the bench's addresses never meet those of tests running beside it.
  const backend = new LocalBackend({ stateDir: fleetDir, network: 'netns', subnet: '10.213.204.0/24', releaseGraceSeconds: 1 });
  const taskQueue = `bench-heal-${process.pid}`;
  const worker = await startInProcessWorker(env, taskQueue, { local: backend });
  const bench: Bench = { env, troupe: new TroupeClient(env.client, { taskQueue }), fleetDir, sharedDir, namespacesSeen: new Set(), problems: [] };
  console.log(`heal: Temporal: ${env.kind}; ${REPS} repetitions per figure; load average ${fmt(loadAverage(), 1)} at the start; /run/netns holds ${namespacesBefore.length} namespaces (other work's too)`);
  const scenarios: Scenario[] = [];
  try {
    for (const scenario of [restartScenario, scaleScenario, retryScenario]) {
      scenarios.push(await scenario(bench));
      console.log(report(scenarios.slice(-1)));
    }
  } finally {
    await worker.stop();
    await env.close();
    rmSync(fleetDir, { recursive: true, force: true });
    rmSync(sharedDir, { recursive: true, force: true });
  }
  const ours = [...bench.namespacesSeen].filter((n) => existsSync(`/run/netns/${n}`));
  console.log(`\nheal: the runs used ${bench.namespacesSeen.size} namespaces, ${ours.length} left; /run/netns holds ${namespaces().length} now (${namespacesBefore.length} before, other work's included)`);
  console.log(`\n== heal: summary (${REPS} repetitions, load average ${fmt(loadAverage(), 1)} at the end) ==${report(scenarios)}`);
  writeFileSync(join(resultsDir(), 'heal.json'), `${JSON.stringify({ reps: REPS, retry_backoff_s: RETRY_BACKOFF_S, scenarios }, null, 2)}\n`);
  if (ours.length > 0) bench.problems.push(`namespaces left: ${ours.join(' ')}`);
  if (bench.problems.length > 0) {
    console.error(`heal: FAILED:\n${bench.problems.map((p) => `- ${p}`).join('\n')}`);
    process.exitCode = 1;
  }
}

await main();
