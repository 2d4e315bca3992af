/**
 * Groups that heal and scale, beside a whole-run retry, with a real worker in this process, on the
 * LOCAL fleet (network namespaces, real processes, as root) and on SSH test hosts (sshd in network
 * namespaces, test/e2e/hosts, one fleet of 8 hosts): the PD service sample of the e2e tests
 * (test/e2e/local-heal-fixtures.ts: a router, stand-in prefill and decode HTTP servers READY once
 * their probe answers 200). The cases, one run each unless said:
 *
 * - restart-node: decode `on_failure: restart-node`; its server killed with SIGKILL, N times → the
 *   replacement's READY, while the router and prefill keep their pids (the bench fails if not);
 * - scale: decode `nodes: 1..3`; `RunHandle.scaleGroup` 1 → 2 and 2 → 1, N times each;
 * - retry: decode without `on_failure`, the run with `retry: {on_events: [error]}` and the
 *   smallest back-off; its server killed, N times → every node up in the next submission;
 * - retry-default: the same with the default back-off (5 s), a new run per repetition (so each
 *   is a run's first resubmission: the back-off doubles after each);
 * - restart-group: decode of 2 nodes `on_failure: restart-group`, the router
 *   `on_dependency_restart: restart`; one decode server killed → both decode nodes new and READY,
 *   the router started again after them; prefill keeps its pid;
 * - quorum: prefill of 3 nodes, the third held back 2 s after the second is READY; a new run per
 *   repetition with `ready: {min: 2}` and one without → when the router runs;
 * - handover: decode `restart-node`, the run `continue_as_new_after_events: 100`; decode killed
 *   until the run continues as new, N times → how long its jobs go unsupervised, no process restarted.
 *
 *   npx tsx bench/heal.ts [case…]    (every case by default; BENCH_HEAL_REPS=5;
 *                                     BENCH_LOCAL=0 / BENCH_SSH=0 skip a fleet)
 *
 * SSH test hosts use a fixed subnet: run the SSH target under the shared lock, one case at a time
 * (`flock /work/wt/ssh-hosts.lock env BENCH_LOCAL=0 npx tsx bench/heal.ts retry`).
 *
 * Every time is measured, from the bench's clock at the kill or the request to the run state's
 * timestamps (workflow time on this machine), the run's history (signals, the back-off's timer),
 * the router's hook log (the hook writes its own time) or a GET of the new server from inside its
 * namespace (the stand-in's own start-up and 1 s warm-up, beside its READY). Prints a table per
 * case, merges its cases into bench/results/heal.json (by fleet and case). Asserts no timing;
 * fails when a node that should keep running did not, or a run left a process, namespace, lease,
 * user or held host behind.
 */
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BackendRegistry } from '../activities/types';
import { LocalBackend } from '../src/backends/local/local-backend';
import { netnsAvailable } from '../src/backends/local/netns';
import { lookupUser, runUserName } from '../src/backends/local/run-user';
import { TroupeClient } from '../src/client';
import type { Resources } from '../src/config/resources-schema';
import type { GroupPlan, Plan } from '../src/plan/plan-schema';
import { jobVisibleTempDir, pidAlive } from '../test/helpers/local-fleet';
import { askRouter, serverPidIn, servicePlan } from '../test/e2e/local-heal-fixtures';
import { leftovers } from '../test/helpers/leftovers';
import { testHostSized } from '../test/helpers/plans';
import { nodeGroupWorkflowId, runWorkflowId } from '../src/contract/ids';
import { RunOptionsSchema } from '../src/contract/message-schemas';
import { runStateQuery, type RunOptionsInput } from '../src/contract/messages';
import type { JobState, RunState } from '../src/contract/run-state';
import { loadAverage } from './harness/cpu';
import { firstEvent, lastEvent, lastEventOf, timersOf, workflowCost } from './harness/history';
import { resultsDir } from './harness/results';
import { createBenchSshFleet } from './harness/ssh-fleet';
import { fmt, median, percentile } from './harness/stats';
import { startBenchTemporal, startInProcessWorker, type BenchTemporal } from './harness/temporal-env';

const REPS = Number(process.env.BENCH_HEAL_REPS ?? 5);
/** The smallest first back-off: the option takes any positive number, and a workflow timer lasts at least 1 ms. */
const FORCED_BACKOFF_S = 0.001;
/** What users get when they set nothing. */
const DEFAULT_BACKOFF_S = RunOptionsSchema.parse({}).retry_backoff_s;
const RUN_OPTIONS: RunOptionsInput = { stop_grace_s: 1 };
const WAIT_LIMIT_MS = 120_000;
/** How long the third prefill node is held back after the second is READY (quorum). */
const QUORUM_HOLD_MS = 2_000;
/** SSH hosts: enough for the largest case (restart-group: 4 nodes and 3 new machines at once) and a spare. */
const SSH_HOSTS = Array.from({ length: 8 }, (_, i) => `h${i}`);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const at = (iso: string | null | undefined): number => (iso ? Date.parse(iso) : Number.NaN);

/** One figure: a name and its samples in ms. */
type Series = Record<string, number[]>;

interface Scenario {
  /** The fleet: `local` or `ssh`. */
  target: string;
  /** The case, as named on the command line. */
  case: string;
  label: string;
  reps: number;
  /** When it was measured (ISO). */
  measured_at: string;
  series: Series;
  /** The 1-minute load average at each repetition. */
  load: number[];
  notes: string[];
}

/** A fleet the cases run on: how its runs are submitted, where a node's processes live, what must be gone after. */
interface HealTarget {
  name: 'local' | 'ssh';
  backend: string;
  registry: BackendRegistry;
  /** Fleets the runs name (SSH), and every group's resources there. */
  fleets?: string[];
  resources?: Resources;
  /** Once the worker polls (the SSH fleet is applied here). */
  prepare?(): Promise<void>;
  /** The network namespace a job's processes run in (its machine's, or its host's). */
  netnsOf(job: JobState | undefined): string;
  /** Sees every state the bench reads (the local fleet notes the namespaces its machines had). */
  observe(state: RunState): void;
  /** Until the machine a job had is given back; false if it is not within 30 s. */
  released(job: JobState): Promise<boolean>;
  /** Whether it was already given back (no wait). */
  releasedNow(job: JobState): Promise<boolean>;
  /** What an ended run left behind (empty: nothing). */
  leftBehind(state: RunState): Promise<string[]>;
  /** While the worker still polls, after the last case (the SSH fleet is deleted). */
  release?(): Promise<void>;
  cleanup(): Promise<void>;
  /** A closing line on what the target used and left. */
  summary(): string;
}

/** What the cases need: the client, the fleet, and what went wrong beside the figures. */
interface Bench {
  env: BenchTemporal;
  troupe: TroupeClient;
  target: HealTarget;
  sharedDir: string;
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

interface SampleOptions {
  prefillNodes?: number;
  prefill?: Partial<GroupPlan>;
  router?: Partial<GroupPlan>;
}

function samplePlan(bench: Bench, name: string, decode: Partial<GroupPlan>, hookLog: string, more: SampleOptions = {}): Plan {
  return servicePlan(name, decode, { ...more, hookLog, resources: bench.target.resources, router: { on_peers_change: timedHook(hookLog), ...more.router } });
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

const ipOf = (job: JobState | undefined): string => job?.instance?.internal_ip ?? '';

/** Every node up: the router RUNNING (it has no probe), prefill and decode READY. */
const allUp = (s: RunState) =>
  s.status === 'RUNNING' && s.jobs.filter((j) => !j.removed).every((j) => j.status === 'READY' || (j.group_name === 'router' && j.status === 'RUNNING'));

async function queryState(bench: Bench, name: string): Promise<RunState> {
  const state = await bench.env.client.workflow.getHandle(runWorkflowId(name)).query(runStateQuery);
  bench.target.observe(state);
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
    execFile('ip', ['netns', 'exec', bench.target.netnsOf(job), 'python3', '-c', FIRST_OK, ipOf(job)], { timeout: Math.max(1, deadline - Date.now()) }, (err, stdout) => {
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

interface KeptNode {
  label: string;
  netns: string;
  pid: number;
  jobPid: number | null;
}

/** Nodes that must keep running through a restart or resize of another group (by job number). */
function keptPids(bench: Bench, state: RunState, jobNums: number[]): KeptNode[] {
  return jobNums.map((n) => {
    const job = state.jobs[n];
    const netns = bench.target.netnsOf(job);
    return { label: `${job?.group_name}/${job?.group_job_index}`, netns, pid: serverPidIn(netns), jobPid: job?.pid ?? null };
  });
}

function checkKept(kept: KeptNode[], jobNums: number[], state: RunState, when: string): void {
  for (const [i, k] of kept.entries()) {
    const job = state.jobs[jobNums[i] ?? -1];
    if (!pidAlive(k.pid) || serverPidIn(k.netns) !== k.pid || job?.pid !== k.jobPid || job.attempt !== 0) {
      throw new Error(`${k.label} did not keep running ${when}: server pid ${k.pid} alive ${pidAlive(k.pid)}, job pid ${k.jobPid} → ${job?.pid}, attempt ${job?.attempt}`);
    }
  }
}

// ---------------------------------------------------------------- one run per scenario

/** Submits the run, hands it to `body` once `ready` holds (every node up by default), and stops it whatever happens. */
async function withRun(bench: Bench, name: string, plan: Plan, options: RunOptionsInput, body: (state: RunState, submittedMs: number) => Promise<void>, ready = allUp): Promise<void> {
  const t0 = Date.now();
  const run = await bench.troupe.submit({ plan, backend: bench.target.backend, ...(bench.target.fleets ? { fleets: bench.target.fleets } : {}), options });
  try {
    await body(await waitFor(bench, name, ready, 'every node up'), t0);
  } finally {
    await run.stop().catch((err: unknown) => bench.problems.push(`${name}: stop failed: ${String(err)}`));
    const end = await run.wait();
    const found = await bench.target.leftBehind(end);
    if (found.length > 0) bench.problems.push(`${end.run_name}: left behind: ${found.join('; ')}`);
    console.log(`heal: ${end.run_name} ended ${end.status} (${end.termination_reason}); left behind: ${found.length === 0 ? 'nothing' : found.join('; ')}`);
  }
}

function newScenario(bench: Bench, caseName: string, label: string): Scenario & { add: (key: string, value: number) => void } {
  const scenario: Scenario = { target: bench.target.name, case: caseName, label, reps: REPS, measured_at: new Date().toISOString(), series: {}, load: [], notes: [] };
  return Object.assign(scenario, { add: (key: string, value: number) => (scenario.series[key] ??= []).push(value) });
}

/** The scenario without its helper (what the JSON holds). */
const done = ({ add: _add, ...scenario }: Scenario & { add: unknown }): Scenario => scenario;

/** Where a run's `on_peers_change` hook (the router's) logs what it was told. */
const hooksOf = (bench: Bench, name: string) => join(bench.sharedDir, `${name}.hooks`);
/** Decode replaced whenever it fails (the restart cases count many). */
const DECODE_RESTARTS: Partial<GroupPlan> = { on_failure: { action: 'restart-node', max_restarts: 1_000, within_s: null } };

const runName = (bench: Bench, caseName: string, rep?: number) => `bench-heal-${bench.target.name}-${caseName}-${process.pid}${rep === undefined ? '' : `-${rep}`}`;

async function restartScenario(bench: Bench): Promise<Scenario> {
  const name = runName(bench, 'restart');
  const hookLog = hooksOf(bench, name);
  const plan = samplePlan(bench, name, DECODE_RESTARTS, hookLog);
  const scenario = newScenario(bench, 'restart-node', 'restart-node');
  const { add } = scenario;
  const kills: number[] = [];
  const routed: string[] = [];
  const addresses: string[] = [];
  await withRun(bench, name, plan, RUN_OPTIONS, async (up) => {
    const kept = keptPids(bench, up, [0, 1]);
    let state = up;
    for (let i = 0; i < REPS; i++) {
      scenario.load.push(loadAverage());
      const decode = state.jobs[2];
      if (!decode) throw new Error(`${name}: no decode job`);
      const attempt = decode.attempt;
      const victim = serverPidIn(bench.target.netnsOf(decode));
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
      checkKept(kept, [0, 1], state, `through restart ${i + 1}`);
      if (!(await bench.target.released(decode))) bench.problems.push(`${name}: the replaced machine of decode attempt ${attempt} was not released`);
      process.stdout.write('.');
    }
    process.stdout.write('\n');
  });
  // The job's exit as the run's history received it (the state records it once the workflow task runs).
  const signals = await jobEventSignals(bench, name);
  scenario.series = { 'kill → exit signalled to the run': kills.map((t) => failureReached(signals, t) - t), ...scenario.series };
  scenario.notes.push('router and prefill kept their server pids and attempt 0 through every restart');
  scenario.notes.push(routerNote(routed, 'decode/0', addresses));
  return done(scenario);
}

/**
 * A long-lived run continuing as new (`continue_as_new_after_events: 100`): decode's server killed
 * until the run hands over (one restart passes 100 events in the first execution, two in later
 * ones, which start at ~30 and must add 100 of their own). Per hand-over: how long the run stops
 * supervising its jobs (from its decision, the first cancel of a group child, to the last group
 * of the next execution scheduling its supervision again), and that no process was started again.
 */
async function handoverScenario(bench: Bench): Promise<Scenario> {
  const name = runName(bench, 'handover');
  const hookLog = hooksOf(bench, name);
  const plan = samplePlan(bench, name, DECODE_RESTARTS, hookLog);
  const scenario = newScenario(bench, 'handover', 'continue-as-new');
  const { add } = scenario;
  const restartsPer: number[] = [];
  const client = bench.env.client;
  const workflowId = runWorkflowId(name);
  await withRun(bench, name, plan, { ...RUN_OPTIONS, continue_as_new_after_events: 100 }, async (up) => {
    const kept = keptPids(bench, up, [0, 1]);
    let state = up;
    let runId = (await client.workflow.getHandle(workflowId).describe()).runId;
    for (let generation = 1; generation <= REPS; generation++) {
      scenario.load.push(loadAverage());
      let next: string | null = null;
      let restarts = 0;
      while (next === null) {
        const attempt = state.jobs[2]?.attempt ?? 0;
        process.kill(serverPidIn(bench.target.netnsOf(state.jobs[2])), 'SIGKILL');
        restarts += 1;
        state = await waitFor(bench, name, (s) => allUp(s) && s.jobs[2]?.attempt === attempt + 1, `decode attempt ${attempt + 1} READY`);
        next = await nextExecution(bench, workflowId, runId, 5_000);
      }
      restartsPer.push(restarts);
      const decodePid = serverPidIn(bench.target.netnsOf(state.jobs[2]));
      const old = await workflowCost(client, workflowId, runId);
      const decided = firstEvent(old, 'requestCancelExternalWorkflowExecutionInitiated');
      const continued = lastEvent(old, 'workflowExecutionContinuedAsNew');
      const supervised = await supervisedAgain(bench, plan, workflowId, generation);
      add('events in the execution that handed over (a count, not ms)', old.events);
      add('decision → continued as new (the group children ended)', continued - decided);
      add('continued as new → every group supervises its jobs again', supervised - continued);
      add('decision → supervised again (no job watched meanwhile; exits wait on the hosts)', supervised - decided);
      state = await waitFor(bench, name, allUp, 'every node up after the hand-over');
      checkKept(kept, [0, 1], state, `through hand-over ${generation}`);
      if (serverPidIn(bench.target.netnsOf(state.jobs[2])) !== decodePid) bench.problems.push(`${name}: decode's server changed through hand-over ${generation}`);
      runId = next;
      process.stdout.write('.');
    }
    process.stdout.write('\n');
  });
  scenario.notes.push(`restarts per hand-over: ${restartsPer.join(', ')}`);
  scenario.notes.push('router, prefill and the current decode node kept their server pids through every hand-over');
  return done(scenario);
}

/** When the last group child of the run's `generation` scheduled its supervision of the jobs it took up. */
async function supervisedAgain(bench: Bench, plan: Plan, workflowId: string, generation: number): Promise<number> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const children = await Promise.all(plan.groups.map((g) => workflowCost(bench.env.client, nodeGroupWorkflowId(workflowId, g.name, 0, generation)).catch(() => null)));
    const found = children.flatMap((c) => (c ? [c] : []));
    if (found.length === plan.groups.length && found.every((c) => !Number.isNaN(lastEvent(c, 'activityTaskScheduled', 'runJobs')))) {
      return lastEventOf(found, 'activityTaskScheduled', 'runJobs');
    }
    if (Date.now() > deadline) return Number.NaN;
    await sleep(200);
  }
}

/** The run's execution after `runId`, once it has continued as new (null if not within `withinMs`). */
async function nextExecution(bench: Bench, workflowId: string, runId: string, withinMs: number): Promise<string | null> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const latest = (await bench.env.client.workflow.getHandle(workflowId).describe()).runId;
    if (latest !== runId) return latest;
    if (Date.now() > deadline) return null;
    await sleep(100);
  }
}

async function scaleScenario(bench: Bench): Promise<Scenario> {
  const name = runName(bench, 'scale');
  const hookLog = hooksOf(bench, name);
  const plan = samplePlan(bench, name, { nodes: 1, nodes_range: { min: 1, max: 3 } }, hookLog);
  const scenario = newScenario(bench, 'scale', 'scale');
  const { add } = scenario;
  let releasedAtAnswer = 0;
  const routed: string[] = [];
  const addresses: string[] = [];
  await withRun(bench, name, plan, RUN_OPTIONS, async (up) => {
    const kept = keptPids(bench, up, [0, 1]);
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
      checkKept(kept, [0, 1], state, `through resize ${i + 1} (1 → 2)`);

      const t2 = Date.now();
      const shrunk = await run.scaleGroup('decode', 1);
      const t3 = Date.now();
      if (shrunk.nodes !== 1 || shrunk.removed[0] !== added.job_num) throw new Error(`${name}: 2 → 1 answered ${JSON.stringify(shrunk)}`);
      if (await bench.target.releasedNow(added)) releasedAtAnswer += 1;
      add('2 → 1: request → answer (node stopped, machine released)', t3 - t2);
      add("2 → 1: request → the router's hook has one", (await routerTold(hookLog, t2, (ips) => ips.length === 1 && ips[0] === first)) - t2);
      if (!(await bench.target.released(added))) bench.problems.push(`${name}: the removed node's machine (${ipOf(added)}) was not released`);
      checkKept(kept, [0, 1], await queryState(bench, name), `through resize ${i + 1} (2 → 1)`);
      process.stdout.write('.');
    }
    process.stdout.write('\n');
  });
  scenario.notes.push(`the removed node's machine was released when 2 → 1 answered in ${releasedAtAnswer} of ${REPS}`);
  scenario.notes.push('router and prefill kept their server pids and attempt 0 through every resize');
  scenario.notes.push(routerNote(routed, 'decode/1', addresses));
  scenario.notes.push('the first 1 → 2 adds rank 3; the later ones take it back as a new attempt (a fresh machine each time)');
  return done(scenario);
}

/** The decode server killed in a run with `retry`, until every node is up in the next submission. Returns that state. */
async function killForRetry(bench: Bench, name: string, state: RunState, add: (key: string, value: number) => void): Promise<{ state: RunState; killedMs: number; restartedToo: boolean }> {
  const before = keptPids(bench, state, [0, 1]);
  const submission = state.submission;
  const victim = serverPidIn(bench.target.netnsOf(state.jobs[2]));
  const t0 = Date.now();
  process.kill(victim, 'SIGKILL');
  const answered = await serverAnswers(bench, name, (s) => (s.submission === submission + 1 ? s.jobs[2] : undefined));
  const next = await waitFor(bench, name, (s) => s.submission === submission + 1 && allUp(s), `submission ${submission + 1} up`);
  const decode = next.jobs[2];
  const latest = (f: (j: JobState) => string | null) => Math.max(...next.jobs.map((j) => at(f(j))));
  add('kill → resubmitted', at(next.jobs[0]?.submitted_at) - t0);
  add('kill → all provisioned', latest((j) => j.provisioned_at) - t0);
  add('kill → decode RUNNING', at(decode?.running_at) - t0);
  add('kill → the new server answers 200 (GET every 20 ms in its namespace)', answered - t0);
  add('kill → decode READY', at(decode?.ready_at) - t0);
  add(EVERY_NODE_UP, latest((j) => j.ready_at ?? j.running_at) - t0);
  return { state: next, killedMs: t0, restartedToo: before.every((k) => !pidAlive(k.pid)) };
}

const EVERY_NODE_UP = 'kill → every node up (the router RUNNING again, after prefill and decode READY)';

/** What the run's history says of each kill: when the exit reached the run, and its back-off timer. */
async function retryHistory(bench: Bench, name: string, kills: number[]): Promise<Series> {
  const signals = await jobEventSignals(bench, name);
  // The back-off is capped at 5 minutes; the run's only other timer is the address deadline (600 s).
  const timers = (await timersOf(bench.env.client, runWorkflowId(name))).filter((t) => t.durationMs <= 300_000);
  const backoffs = kills.map((t) => timers.find((timer) => timer.startedMs >= t));
  return {
    'kill → exit signalled to the run': kills.map((t) => failureReached(signals, t) - t),
    'kill → teardown done, back-off starts': backoffs.map((b, i) => (b?.startedMs ?? Number.NaN) - (kills[i] ?? Number.NaN)),
    'back-off timer: started → fired': backoffs.map((b) => (b ? b.firedMs - b.startedMs : Number.NaN)),
    'back-off asked': backoffs.map((b) => b?.durationMs ?? Number.NaN),
  };
}

function concat(into: Series, more: Series): Series {
  for (const [key, values] of Object.entries(more)) (into[key] ??= []).push(...values);
  return into;
}

/**
 * The whole-run retry. `forced`: the smallest back-off, every kill in one run (the back-off doubles
 * from 1 ms, all under the server's ~1 s floor). `default`: the back-off users get (5 s), a new run
 * per repetition so that each is a first resubmission.
 */
async function retryScenario(bench: Bench, backoff: 'forced' | 'default'): Promise<Scenario> {
  const forced = backoff === 'forced';
  const caseName = forced ? 'retry' : 'retry-default';
  const scenario = newScenario(bench, caseName, forced ? `whole-run retry, back-off ${FORCED_BACKOFF_S * 1000} ms asked` : `whole-run retry, default back-off (${DEFAULT_BACKOFF_S} s)`);
  const options: RunOptionsInput = { ...RUN_OPTIONS, ...(forced ? { retry_backoff_s: FORCED_BACKOFF_S } : {}), retry: { on_events: ['error'], duration_s: 3_600 } };
  let history: Series = {};
  let restartedToo = 0;
  const runs = forced ? [{ name: runName(bench, caseName), kills: REPS }] : Array.from({ length: REPS }, (_, i) => ({ name: runName(bench, caseName, i), kills: 1 }));
  for (const { name, kills: count } of runs) {
    const plan = samplePlan(bench, name, {}, hooksOf(bench, name));
    const kills: number[] = [];
    await withRun(bench, name, plan, options, async (up) => {
      let state = up;
      for (let i = 0; i < count; i++) {
        scenario.load.push(loadAverage());
        const killed = await killForRetry(bench, name, state, scenario.add);
        state = killed.state;
        kills.push(killed.killedMs);
        if (killed.restartedToo) restartedToo += 1;
        process.stdout.write('.');
      }
    });
    history = concat(history, await retryHistory(bench, name, kills));
  }
  process.stdout.write('\n');
  const asked = history['back-off asked'] ?? [];
  delete history['back-off asked'];
  scenario.series = { ...history, ...scenario.series };
  scenario.notes.push(`back-off durations asked: ${asked.map((ms) => `${fmt(ms)} ms`).join(', ')} (retry_backoff_s ${forced ? FORCED_BACKOFF_S : `${DEFAULT_BACKOFF_S}, the default`}; it doubles per resubmission of a run)`);
  scenario.notes.push(forced ? `one run, ${REPS} resubmissions` : `${REPS} runs, one resubmission each (its first)`);
  scenario.notes.push(`router and prefill were stopped and started again (new pids) in ${restartedToo} of ${REPS}`);
  return done(scenario);
}

/**
 * restart-group on decode (2 nodes) and `on_dependency_restart: restart` on the router: one decode
 * server killed → both decode nodes on new machines and READY, then the router started again.
 */
async function restartGroupScenario(bench: Bench): Promise<Scenario> {
  const name = runName(bench, 'group');
  const hookLog = hooksOf(bench, name);
  const plan = samplePlan(bench, name, { nodes: 2, on_failure: { action: 'restart-group', max_restarts: 1_000, within_s: null } }, hookLog, { router: { on_dependency_restart: 'restart' } });
  const scenario = newScenario(bench, 'restart-group', 'restart-group (decode, 2 nodes) with the router on_dependency_restart: restart');
  const { add } = scenario;
  const kills: number[] = [];
  const routed: string[] = [];
  await withRun(bench, name, plan, RUN_OPTIONS, async (up) => {
    const kept = keptPids(bench, up, [1]);
    let state = up;
    for (let i = 0; i < REPS; i++) {
      scenario.load.push(loadAverage());
      const [router, , decode0, decode1] = state.jobs;
      if (!router || !decode0 || !decode1) throw new Error(`${name}: jobs missing`);
      const attempts = [router.attempt, decode0.attempt, decode1.attempt];
      const victim = serverPidIn(bench.target.netnsOf(decode1));
      const t0 = Date.now();
      process.kill(victim, 'SIGKILL');
      kills.push(t0);
      state = await waitFor(
        bench,
        name,
        (s) => allUp(s) && [0, 2, 3].every((n, k) => s.jobs[n]?.attempt === (attempts[k] ?? 0) + 1),
        `restart ${i + 1}: both decode nodes and the router again`,
      );
      const [r, , d0, d1] = state.jobs;
      const both = (f: (j: JobState | undefined) => string | null | undefined) => Math.max(at(f(d0)), at(f(d1)));
      add('kill → the other decode node stopped', at(d0?.previous_attempts.at(-1)?.finished_at) - t0);
      add('kill → the router stopped', at(r?.previous_attempts.at(-1)?.finished_at) - t0);
      add('kill → both new decode machines provisioned', both((j) => j?.provisioned_at) - t0);
      add('kill → both decode RUNNING', both((j) => j?.running_at) - t0);
      add('kill → both decode READY', both((j) => j?.ready_at) - t0);
      add('kill → the router RUNNING again (every node up)', at(r?.running_at) - t0);
      routed.push(await throughRouter(ipOf(r)));
      checkKept(kept, [1], state, `through group restart ${i + 1}`);
      process.stdout.write('.');
    }
    process.stdout.write('\n');
  });
  const signals = await jobEventSignals(bench, name);
  scenario.series = { 'kill → exit signalled to the run': kills.map((t) => failureReached(signals, t) - t), ...scenario.series };
  scenario.notes.push('prefill kept its server pid and attempt 0 through every group restart');
  scenario.notes.push(`a request through the restarted router after each: ${routed.join(', ')}`);
  return done(scenario);
}

/**
 * Quorum: prefill of 3 nodes whose third is held back (its probe fails) until QUORUM_HOLD_MS after
 * the second is READY; with `ready: {min: 2}` the router may start before it, without only after.
 * A new run per repetition and variant, alternating.
 */
async function quorumScenario(bench: Bench): Promise<Scenario> {
  const scenario = newScenario(bench, 'quorum', `quorum: prefill of 3, the third READY ${QUORUM_HOLD_MS / 1000} s after the second; ready: {min: 2} beside all 3`);
  const { add } = scenario;
  for (let i = 0; i < REPS; i++) {
    for (const quorum of [true, false]) {
      const name = runName(bench, quorum ? 'quorum' : 'all3', i);
      const gate = join(bench.sharedDir, `${name}.open`);
      const probe = { check: { kind: 'command' as const, command: `python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8000/", timeout=2)' && { [ "$DSTACK_NODE_GROUP_NODE_RANK" != 2 ] || [ -e ${gate} ]; }` }, interval_s: 0.3, timeout_s: 60 };
      const prefill: Partial<GroupPlan> = { ready: probe, ...(quorum ? { ready_min: { kind: 'count', value: 2 } } : {}) };
      const plan = samplePlan(bench, name, {}, hooksOf(bench, name), { prefillNodes: 3, prefill });
      const tag = quorum ? 'ready: {min: 2}' : 'all 3 READY';
      if (quorum) scenario.load.push(loadAverage());
      let submitted = 0;
      const secondReady = (s: RunState) => s.jobs.filter((j) => j.group_name === 'prefill' && j.status === 'READY').length >= 2;
      await withRun(
        bench,
        name,
        plan,
        RUN_OPTIONS,
        async (second, t0) => {
          submitted = t0;
          const secondAt = Math.max(...second.jobs.filter((j) => j.group_name === 'prefill' && j.ready_at).map((j) => at(j.ready_at)));
          await sleep(Math.max(0, secondAt + QUORUM_HOLD_MS - Date.now()));
          writeFileSync(gate, '');
          const up = await waitFor(bench, name, allUp, 'every node up');
          const prefills = up.jobs.filter((j) => j.group_name === 'prefill').map((j) => at(j.ready_at)).sort((a, b) => a - b);
          const routerRunning = at(up.jobs[0]?.running_at);
          add(`${tag}: submit → router RUNNING`, routerRunning - submitted);
          add(`${tag}: 2nd prefill READY → router RUNNING`, routerRunning - (prefills[1] ?? Number.NaN));
          add(`${tag}: 3rd prefill READY → router RUNNING`, routerRunning - (prefills[2] ?? Number.NaN));
          add(`${tag}: submit → every node up`, Math.max(routerRunning, ...prefills, at(up.jobs[4]?.ready_at)) - submitted);
        },
        secondReady,
      );
    }
    process.stdout.write('.');
  }
  process.stdout.write('\n');
  scenario.notes.push('negative "3rd prefill READY → router RUNNING": the router ran before the third was READY');
  return done(scenario);
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
    lines.push('', `[${s.target}] ${s.label}: load average ${fmt(Math.min(...load), 1)}–${fmt(Math.max(...load), 1)} during the ${s.reps} repetitions`);
    lines.push('| ms | median | p90 | min–max | n |', '|---|---|---|---|---|');
    for (const [label, values] of Object.entries(s.series)) lines.push(row(label, values));
    for (const note of s.notes) lines.push(`- ${note}`);
  }
  for (const target of new Set(scenarios.map((s) => s.target))) {
    const of = (caseName: string, key: string) => scenarios.find((s) => s.target === target && s.case === caseName)?.series[key] ?? [];
    const restart = median(of('restart-node', 'kill → replacement READY'));
    for (const caseName of ['retry', 'retry-default']) {
      const decode = median(of(caseName, 'kill → decode READY'));
      const all = median(of(caseName, EVERY_NODE_UP));
      if (!Number.isFinite(restart) || !Number.isFinite(decode)) continue;
      lines.push(
        '',
        `[${target}] kill → decode READY again (medians): restart-node ${fmt(restart)} ms, ${caseName} ${fmt(decode)} ms (×${fmt(decode / restart, 2)}); ` +
          `every node up again: ${fmt(restart)} ms (the others never stopped) against ${fmt(all)} ms (×${fmt(all / restart, 2)})`,
      );
    }
  }
  return lines.join('\n');
}

/** heal.json: the cases measured now replace those of the same fleet and case, the others stay. */
function writeResults(scenarios: Scenario[]): void {
  const file = join(resultsDir(), 'heal.json');
  let kept: Scenario[] = [];
  try {
    const old = JSON.parse(readFileSync(file, 'utf8')) as { results?: Scenario[] };
    kept = (old.results ?? []).filter((o) => !scenarios.some((s) => s.target === o.target && s.case === o.case));
  } catch {
    // No file yet, or the older layout: start afresh.
  }
  const results = [...kept, ...scenarios].sort((a, b) => `${a.target} ${a.case}`.localeCompare(`${b.target} ${b.case}`));
  writeFileSync(file, `${JSON.stringify({ forced_backoff_s: FORCED_BACKOFF_S, default_backoff_s: DEFAULT_BACKOFF_S, results }, null, 2)}\n`);
}

// ---------------------------------------------------------------- the fleets

function namespaces(): string[] {
  return existsSync('/run/netns') ? readdirSync('/run/netns') : [];
}

/** Until `check` holds (every 50 ms); false if it does not within 30 s. */
async function eventually(check: () => Promise<boolean> | boolean): Promise<boolean> {
  const deadline = Date.now() + 30_000;
  while (!(await check())) {
    if (Date.now() > deadline) return false;
    await sleep(50);
  }
  return true;
}

/** The local fleet: a namespace per machine, in a subnet of its own so the bench never meets tests running beside it. */
function localTarget(): HealTarget {
  const fleetDir = mkdtempSync(join(tmpdir(), 'troupe-bench-heal-fleet-'));
  const backend = new LocalBackend({ stateDir: fleetDir, network: 'netns', subnet: '10.213.204.0/24', releaseGraceSeconds: 1 });
  const seen = new Set<string>();
  const namespacesBefore = namespaces().length;
  const netnsOf = (job: JobState | undefined): string => {
    const netns = job?.instance?.details.netns;
    if (!netns) throw new Error(`job ${job?.job_num} has no namespace`);
    return netns;
  };
  const released = (job: JobState) => !existsSync(`/run/netns/${netnsOf(job)}`);
  return {
    name: 'local',
    backend: 'local',
    registry: { local: backend },
    netnsOf,
    observe(state) {
      for (const job of state.jobs) {
        for (const instance of [job.instance, ...job.previous_attempts.map((a) => a.instance)]) {
          const netns = instance?.details.netns;
          if (netns) seen.add(netns);
        }
      }
    },
    released: (job) => eventually(() => released(job)),
    releasedNow: async (job) => released(job),
    async leftBehind(state) {
      const left = leftovers(state, fleetDir);
      const users = await Promise.all(Array.from({ length: state.submission + 1 }, (_, s) => lookupUser(runUserName(state.run_uid, s))));
      const ours = [...seen].filter((n) => existsSync(`/run/netns/${n}`));
      return [
        left.processes > 0 ? `${left.processes} processes` : '',
        ours.length > 0 ? `namespaces ${ours.join(' ')}` : '',
        left.leases + left.instances > 0 ? `${left.leases} leases, ${left.instances} instance records` : '',
        users.some((u) => u !== null) ? `users ${users.flatMap((u) => (u ? [u.name] : [])).join(' ')}` : '',
      ].filter(Boolean);
    },
    async cleanup() {
      rmSync(fleetDir, { recursive: true, force: true });
    },
    summary() {
      const ours = [...seen].filter((n) => existsSync(`/run/netns/${n}`));
      return `the runs used ${seen.size} namespaces, ${ours.length} left; /run/netns holds ${namespaces().length} now (${namespacesBefore} before, other work's included)`;
    },
  };
}

/** SSH test hosts as one fleet (the hosts the SSH e2e tests use), applied once the worker polls. */
async function sshTarget(env: BenchTemporal, taskQueue: string): Promise<HealTarget> {
  const fleet = await createBenchSshFleet(env, `bench-heal-${process.pid}`, taskQueue, SSH_HOSTS.map((name) => ({ name, skipBashrc: true })));
  const { hosts } = fleet;
  const hostOf = (job: JobState | undefined) => {
    const host = Object.values(hosts.hosts).find((h) => h.address === ipOf(job));
    if (!host) throw new Error(`job ${job?.job_num} is on no test host (${ipOf(job)})`);
    return host;
  };
  const free = async (address: string) => (await fleet.fleets.state(fleet.fleetName))?.hosts.find((h) => h.spec.target.hostname === address)?.holder === null;
  const released = async (job: JobState) => (await free(ipOf(job))) && (await hosts.jobProcesses(hostOf(job).name)).length === 0;
  const used = new Set<string>();
  return {
    name: 'ssh',
    backend: 'ssh',
    registry: { ssh: fleet.backend },
    fleets: [fleet.fleetName],
    resources: testHostSized,
    prepare: () => fleet.apply(),
    netnsOf: (job) => hostOf(job).namespace,
    observe(state) {
      for (const job of state.jobs) for (const j of [job, ...job.previous_attempts]) if (j.instance) used.add(j.instance.internal_ip);
    },
    released: (job) => eventually(() => released(job)),
    releasedNow: released,
    async leftBehind() {
      let found: string[] = [];
      // The run's teardown may still be giving hosts back.
      await eventually(async () => {
        found = [];
        for (const host of Object.values(hosts.hosts)) {
          const procs = await hosts.jobProcesses(host.name);
          if (procs.length > 0) found.push(`${host.name}: ${procs.map((p) => `${p.pid} ${p.command}`).join(', ')}`);
          if (!(await free(host.address))) found.push(`${host.name} still held`);
        }
        return found.length === 0;
      });
      return found;
    },
    release: () => fleet.remove(),
    cleanup: () => fleet.destroy(),
    summary: () => `the runs used ${used.size} of the fleet's ${SSH_HOSTS.length} hosts`,
  };
}

// ---------------------------------------------------------------- main

const CASES: Record<string, (bench: Bench) => Promise<Scenario>> = {
  'restart-node': restartScenario,
  scale: scaleScenario,
  retry: (bench) => retryScenario(bench, 'forced'),
  'retry-default': (bench) => retryScenario(bench, 'default'),
  'restart-group': restartGroupScenario,
  quorum: quorumScenario,
  handover: handoverScenario,
};

async function measureTarget(env: BenchTemporal, make: (taskQueue: string) => Promise<HealTarget> | HealTarget, cases: string[]): Promise<Scenario[]> {
  const taskQueue = `bench-heal-${process.pid}-${Math.random().toString(36).slice(2, 6)}`;
  const target = await make(taskQueue);
  // The jobs run as their runs' own users (local fleet), each with a /tmp of its own, and write the hook logs here.
  const sharedDir = jobVisibleTempDir('troupe-bench-heal-shared-');
  chmodSync(sharedDir, 0o1777);
  const scenarios: Scenario[] = [];
  const bench: Bench = { env, troupe: new TroupeClient(env.client, { taskQueue }), target, sharedDir, problems: [] };
  try {
    const worker = await startInProcessWorker(env, taskQueue, target.registry);
    try {
      await target.prepare?.();
      console.log(`heal: [${target.name}] ${cases.join(', ')}; ${REPS} repetitions each; load average ${fmt(loadAverage(), 1)} at the start`);
      for (const caseName of cases) {
        const measure = CASES[caseName];
        if (!measure) continue;
        try {
          scenarios.push(await measure(bench));
          console.log(report(scenarios.slice(-1)));
        } catch (err) {
          // The other cases are still measured; this one is reported as a failure.
          bench.problems.push(`${caseName}: ${err instanceof Error ? err.message : String(err)}`);
        }
      }
    } finally {
      await target.release?.();
      await worker.stop();
    }
  } finally {
    await target.cleanup();
    rmSync(sharedDir, { recursive: true, force: true });
  }
  console.log(`\nheal: [${target.name}] ${target.summary()}`);
  if (bench.problems.length > 0) {
    console.error(`heal: [${target.name}] FAILED:\n${bench.problems.map((p) => `- ${p}`).join('\n')}`);
    process.exitCode = 1;
  }
  return scenarios;
}

async function main(): Promise<void> {
  const asked = process.argv.slice(2);
  const unknown = asked.filter((c) => !(c in CASES));
  if (unknown.length > 0) throw new Error(`heal: unknown case ${unknown.join(', ')}; the cases: ${Object.keys(CASES).join(', ')}`);
  const cases = asked.length > 0 ? asked : Object.keys(CASES);
  if (!(await netnsAvailable())) {
    // The sample's servers all listen on :8000: they need a namespace (or an SSH host) each.
    console.log('heal: NOT measured: the PD service sample needs root and network namespaces');
    return;
  }
  const env = await startBenchTemporal('heal');
  console.log(`heal: Temporal: ${env.kind}`);
  const scenarios: Scenario[] = [];
  try {
    if (process.env.BENCH_LOCAL !== '0') scenarios.push(...(await measureTarget(env, () => localTarget(), cases)));
    if (process.env.BENCH_SSH !== '0') scenarios.push(...(await measureTarget(env, (taskQueue) => sshTarget(env, taskQueue), cases)));
  } finally {
    await env.close();
  }
  console.log(`\n== heal: summary (${REPS} repetitions, load average ${fmt(loadAverage(), 1)} at the end) ==${report(scenarios)}`);
  writeResults(scenarios);
}

await main();
// After restart-node on SSH one SSH connection, ended by closeAllSshSessions() but not yet closed,
// waits for the FIN of a test host already destroyed and holds the process (BENCHMARKS.md section 6).
process.exit();
