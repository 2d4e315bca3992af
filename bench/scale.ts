/**
 * Control-plane cost of big runs on the SIMULATED backend (provisions nothing, runs nothing: a
 * "job" is a start time in the worker's memory), so what is measured is Troupe + Temporal alone:
 * submit → all RUNNING, submit → end, workflow tasks, history events and bytes of the run and of
 * its largest group child, and the worker's peak RSS (the worker runs in its own process).
 *
 *   npx tsx bench/scale.ts                      every case
 *   npx tsx bench/scale.ts 64x4 2048x32 hold    chosen cases (NODESxGROUPS; hold: the slot experiment)
 *   BENCH_SCALE_TIMEOUT_S=120 npx tsx bench/scale.ts
 *
 * Prints figures, writes bench/results/scale.{png,json}. Asserts nothing.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { DEFAULT_MAX_ACTIVITIES } from '../src/worker/create-worker';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { nodeGroupWorkflowId, runWorkflowId } from '../src/contract/ids';
import type { WorkflowHandle } from '@temporalio/client';
import { withAllJobs } from '../src/client/run-jobs';
import { runJobsQuery, runStateQuery } from '../src/contract/messages';
import type { RunState } from '../src/contract/run-state';
import { cpuSeconds, loadAverage } from './harness/cpu';
import { lastEventOf, workflowCost, type WorkflowCost } from './harness/history';
import { pdPlan, spreadPlan } from './harness/plans';
import { resultsDir } from './harness/results';
import { bytes, fmt } from './harness/stats';
import { startBenchTemporal, type BenchTemporal } from './harness/temporal-env';
import { startWorkerProcess } from './harness/worker-process';
import { lineChart, stackedBarChart, stackVertically, writePng, type Series } from './plot/charts';

/** The run's state with its jobs (a large run gives them a page at a time). */
function allJobs(handle: WorkflowHandle, state: RunState): Promise<RunState> {
  return withAllJobs(state, (offset, limit) => handle.query(runJobsQuery, { offset, limit }));
}

const TAG = '[SIMULATED]';
/** Temporal's per-workflow warning limits (the hard limits are 51,200 events and 50 MiB). */
const WARN_EVENTS = 10_240;
const WARN_BYTES = 10 * 1024 * 1024;

interface ScaleCase {
  nodes: number;
  groups: number;
  /** How long each simulated job runs. */
  jobDurationMs: number;
  /** The worker's activity slots (troupe worker's default, DEFAULT_MAX_ACTIVITIES, when absent). */
  slots?: number;
  timeoutS: number;
  note?: string;
  /** Run only when named on the command line (`npx tsx bench/scale.ts 4096x64`). */
  optIn?: boolean;
}

/** Chosen cases write beside the full results, not over them. */
const outputName = process.argv.length > 2 ? `scale-${process.argv.slice(2).join('_')}` : 'scale';

const timeoutOverride = process.env.BENCH_SCALE_TIMEOUT_S ? Number(process.env.BENCH_SCALE_TIMEOUT_S) : null;

const ALL_CASES: ScaleCase[] = [
  { nodes: 8, groups: 2, jobDurationMs: 0, timeoutS: 60 },
  { nodes: 64, groups: 4, jobDurationMs: 0, timeoutS: 90 },
  { nodes: 512, groups: 16, jobDurationMs: 0, timeoutS: 150 },
  { nodes: 2048, groups: 32, jobDurationMs: 0, timeoutS: 240 },
  { nodes: 512, groups: 2, jobDurationMs: 0, timeoutS: 150, note: 'few big groups' },
  { nodes: 2048, groups: 2, jobDurationMs: 0, timeoutS: 150, note: 'few big groups' },
  { nodes: 4096, groups: 64, jobDurationMs: 0, timeoutS: 240, note: 'the largest run a plan allows', optIn: true },
];

/**
 * Jobs that keep running: each batch of them holds one runJobs activity — one of the worker's
 * activity slots — for as long as it runs. A run of HOLD_NODES such jobs in 2 groups, then a PD
 * run on the same worker: its launch latency, with the SDK's 100 slots and with troupe's default.
 */
const HOLD_NODES = 100;
const HOLD_JOB_S = 30;
/** Seconds over which the CPU cost of merely watching running jobs is measured (and of idling, before). */
const HOLD_WINDOW_S = 8;
const HOLD_SLOTS = [100, undefined];

interface ScaleResult {
  name: string;
  nodes: number;
  groups: number;
  note: string | null;
  completed: boolean;
  status: string;
  message: string | null;
  allRunningMs: number;
  endMs: number;
  jobsRunning: number;
  workflowTasks: number;
  workflowTaskFailures: number;
  firstFailure: string | null;
  /** Workflows the server terminated, with its reason. */
  terminated: string[];
  activities: number;
  parent: Pick<WorkflowCost, 'events' | 'bytes' | 'workflowTasks' | 'signalsIn' | 'signalsOut'>;
  largestChild: Pick<WorkflowCost, 'events' | 'bytes' | 'workflowTasks' | 'signalsIn' | 'signalsOut'> & { workflowId: string };
  parentTopEvents: Array<[string, number]>;
  childTopPayloads: Array<[string, number]>;
  workerPeakRssMiB: number;
  /** ms from submit: last job provisioned, address book at the last child, last runner ready, last startJob done. */
  milestones: { provisioned: number; addresses: number; runnersReady: number; started: number };
  cpu: { serverS: number; workerS: number; benchS: number };
  loadBefore: number;
}

function caseName(c: ScaleCase): string {
  return `${c.nodes}x${c.groups}${c.jobDurationMs > 0 ? `-run${c.jobDurationMs / 1000}s` : ''}${c.slots ? `-slots${c.slots}` : ''}`;
}

async function main(): Promise<void> {
  if (process.env.BENCH_PLOT_ONLY === '1') {
    // The figure again from the last results of these cases, nothing measured.
    const saved = JSON.parse(readFileSync(join(resultsDir(), `${outputName}.json`), 'utf8')) as { results: ScaleResult[]; holds: HoldResult[] };
    return await plot(saved.results, saved.holds);
  }
  const wanted = process.argv.slice(2);
  const cases = wanted.length > 0 ? ALL_CASES.filter((c) => wanted.some((w) => caseName(c).startsWith(w))) : ALL_CASES.filter((c) => !c.optIn);
  console.log(`${TAG} scale: ${cases.map(caseName).join(', ')} — SIMULATED backend, nothing is provisioned or run`);
  const env = await startBenchTemporal('scale');
  const results: ScaleResult[] = [];
  const holds: HoldResult[] = [];
  try {
    for (const c of cases) {
      const result = await runCase(env, c);
      results.push(result);
      printResult(result);
    }
    if (wanted.length === 0 || wanted.includes('hold')) {
      for (const slots of HOLD_SLOTS) {
        const hold = await runHoldCase(env, slots);
        holds.push(hold);
        printHold(hold);
      }
    }
  } finally {
    await env.close();
  }
  writeFileSync(join(resultsDir(), `${outputName}.json`), `${JSON.stringify({ results, holds }, null, 2)}\n`);
  await plot(results, holds);
}

interface HoldResult {
  slots: number | null;
  holderAllRunningMs: number;
  /** The PD run submitted once the holder's jobs all run: submit → all 3 RUNNING (NaN: not within the cap). */
  pdAllRunningMs: number;
  pdRunning: number;
  /** CPU milliseconds per second, idle (before the holder) and while the holder's jobs just run. */
  idleCpu: { server: number; worker: number };
  watchingCpu: { server: number; worker: number };
}

async function cpuRate(serverCpuSeconds: () => number, workerPid: number, seconds: number): Promise<{ server: number; worker: number }> {
  const s0 = serverCpuSeconds();
  const w0 = cpuSeconds(workerPid);
  await sleep(seconds * 1000);
  return { server: ((serverCpuSeconds() - s0) * 1000) / seconds, worker: ((cpuSeconds(workerPid) - w0) * 1000) / seconds };
}

async function runHoldCase(env: BenchTemporal, slots: number | undefined): Promise<HoldResult> {
  const taskQueue = `bench-hold-${slots ?? 'default'}-${process.pid}`;
  const worker = await startWorkerProcess({
    address: env.address,
    task_queue: taskQueue,
    bundle_path: env.bundlePath,
    backend: { kind: 'simulated', job_duration_ms: HOLD_JOB_S * 1000 },
    ...(slots ? { max_concurrent_activities: slots } : {}),
  });
  const start = (runName: string, plan: ReturnType<typeof spreadPlan>) =>
    env.client.workflow.start('RunWorkflow', {
      taskQueue,
      workflowId: runWorkflowId(runName),
      args: [{ plan, backend: 'simulated', options: { stop_grace_s: 0 } }],
    });
  const allRunning = async (handle: Awaited<ReturnType<typeof start>>, t0: number, capMs: number) => {
    for (;;) {
      const state = await allJobs(handle, await handle.query(runStateQuery));
      const running = state.jobs.filter((j) => j.running_at !== null);
      if (running.length === state.jobs.length) return { ms: Math.max(...running.map((j) => Date.parse(j.running_at ?? ''))) - t0, running: running.length };
      if (Date.now() - t0 > capMs) return { ms: Number.NaN, running: running.length };
      await sleep(100);
    }
  };
  try {
    const idleCpu = await cpuRate(env.serverCpuSeconds, worker.pid, HOLD_WINDOW_S / 2);
    const holderName = `hold-${slots ?? 'default'}-${process.pid}`;
    const t0 = Date.now();
    const holder = await start(holderName, spreadPlan(holderName, HOLD_NODES, 2));
    const held = await allRunning(holder, t0, HOLD_JOB_S * 1000);
    const watchingCpu = await cpuRate(env.serverCpuSeconds, worker.pid, HOLD_WINDOW_S);
    const pdName = `hold-pd-${slots ?? 'default'}-${process.pid}`;
    const t1 = Date.now();
    const pd = await start(pdName, pdPlan(pdName, 'true', 'workers-first'));
    const launched = await allRunning(pd, t1, (HOLD_JOB_S + 20) * 1000);
    await Promise.all([holder.terminate('bench: done'), pd.terminate('bench: done')].map((p) => p.catch(() => undefined)));
    return { slots: slots ?? null, holderAllRunningMs: held.ms, pdAllRunningMs: launched.ms, pdRunning: launched.running, idleCpu, watchingCpu };
  } finally {
    await worker.stop();
  }
}

function printHold(h: HoldResult): void {
  const p = `${TAG} hold-${h.slots ?? 'default'}`.padEnd(35);
  console.log(`\n${p} a run of ${HOLD_NODES} jobs that run ${HOLD_JOB_S} s holds 2 runJobs activities (one per group); worker activity slots: ${h.slots ?? `${DEFAULT_MAX_ACTIVITIES} (troupe worker default)`}`);
  console.log(`${p} holder all running after ${fmt(h.holderAllRunningMs)} ms; ${HOLD_WINDOW_S} s later a PD run on the same worker: submit → all 3 RUNNING ${fmt(h.pdAllRunningMs)} ms (${h.pdRunning}/3 ran)`);
  console.log(`${p} CPU while ${HOLD_NODES} jobs just run (watched every 250 ms): Temporal dev server ${fmt(h.watchingCpu.server)} ms/s, worker ${fmt(h.watchingCpu.worker)} ms/s; idle before: ${fmt(h.idleCpu.server)} and ${fmt(h.idleCpu.worker)} ms/s`);
}

async function runCase(env: BenchTemporal, c: ScaleCase): Promise<ScaleResult> {
  const name = caseName(c);
  const taskQueue = `bench-scale-${name}-${process.pid}`;
  const worker = await startWorkerProcess({
    address: env.address,
    task_queue: taskQueue,
    bundle_path: env.bundlePath,
    backend: { kind: 'simulated', job_duration_ms: c.jobDurationMs },
    ...(c.slots ? { max_concurrent_activities: c.slots } : {}),
  });
  const runName = `scale-${name}-${process.pid}`;
  const runId = runWorkflowId(runName);
  const plan = spreadPlan(runName, c.nodes, c.groups);
  const timeoutS = timeoutOverride ?? c.timeoutS;
  const loadBefore = loadAverage();
  const cpuBefore = { server: env.serverCpuSeconds(), worker: cpuSeconds(worker.pid), bench: process.cpuUsage() };
  try {
    const t0 = Date.now();
    const handle = await env.client.workflow.start('RunWorkflow', {
      taskQueue,
      workflowId: runId,
      args: [{ plan, backend: 'simulated', options: { stop_grace_s: 0 } }],
    });
    const outcome = await Promise.race([
      handle.result().then(async (s) => {
        const at = Date.now();
        return { state: await allJobs(handle, s as RunState), at };
      }),
      sleep(timeoutS * 1000, null, { ref: false }),
    ]);
    let state: RunState | null = outcome?.state ?? null;
    if (!outcome) {
      // Past the cap: take what the run knows (if it still answers queries), then end it.
      state = await Promise.race([
        handle.query(runStateQuery).then((s) => allJobs(handle, s)).catch(() => null),
        sleep(10_000, null, { ref: false }),
      ]);
      await handle.terminate(`bench: over the ${timeoutS}s cap`).catch(() => undefined);
    }
    const workerPeakRssMiB = worker.peakRssMiB();
    const benchCpu = process.cpuUsage(cpuBefore.bench);
    const cpu = {
      serverS: env.serverCpuSeconds() - cpuBefore.server,
      workerS: cpuSeconds(worker.pid) - cpuBefore.worker,
      benchS: (benchCpu.user + benchCpu.system) / 1e6,
    };
    const parent = await workflowCost(env.client, runId);
    const children = await Promise.all(
      plan.groups.map((g) => workflowCost(env.client, nodeGroupWorkflowId(runId, g.name, 0)).catch(() => null)),
    );
    const present = children.filter((x): x is WorkflowCost => x !== null);
    const largest = present.reduce((a, b) => (b.events > a.events ? b : a), present[0] ?? parent);
    const running = state?.jobs.filter((j) => j.running_at !== null) ?? [];
    const all = [parent, ...present];
    const pick = (w: WorkflowCost) => ({ events: w.events, bytes: w.bytes, workflowTasks: w.workflowTasks, signalsIn: w.signalsIn, signalsOut: w.signalsOut });
    const lastInChildren = (kind: string, ...names: string[]) => lastEventOf(present, kind, ...names) - t0;
    const lastAt = (field: 'provisioned_at') => Math.max(...(state?.jobs ?? []).map((j) => Date.parse(j[field] ?? ''))) - t0;
    const firstFailure = all.map((w) => w.firstWorkflowTaskFailure).find((m) => m !== null) ?? null;
    return {
      name,
      nodes: c.nodes,
      groups: c.groups,
      note: c.note ?? null,
      completed: outcome !== null,
      status: outcome ? (state?.status ?? '?') : `over ${timeoutS}s cap (${state?.status ?? 'no answer'})`,
      message: state?.message ?? null,
      allRunningMs: running.length === c.nodes ? Math.max(...running.map((j) => Date.parse(j.running_at ?? ''))) - t0 : Number.NaN,
      endMs: outcome ? outcome.at - t0 : Number.NaN,
      jobsRunning: running.length,
      workflowTasks: all.reduce((a, w) => a + w.workflowTasks, 0),
      workflowTaskFailures: all.reduce((a, w) => a + w.workflowTaskFailures, 0),
      firstFailure,
      terminated: all.flatMap((w) => (w.terminatedReason !== null && !w.terminatedReason.startsWith('bench:') ? [`${w.workflowId}: ${w.terminatedReason}`] : [])),
      activities: all.reduce((a, w) => a + w.activities, 0),
      parent: pick(parent),
      largestChild: { ...pick(largest), workflowId: largest.workflowId },
      parentTopEvents: top(parent.eventCounts, 5),
      childTopPayloads: top(largest.payloadBytes, 4),
      workerPeakRssMiB,
      milestones: {
        provisioned: lastAt('provisioned_at'),
        addresses: lastInChildren('workflowExecutionSignaled', 'addressesReady'),
        runnersReady: lastInChildren('activityTaskCompleted', 'waitRunnersReady'),
        started: lastInChildren('activityTaskScheduled', 'runJobs'),
      },
      cpu,
      loadBefore,
    };
  } finally {
    await worker.stop();
  }
}

function top(record: Record<string, number>, n: number): Array<[string, number]> {
  return Object.entries(record).sort((a, b) => b[1] - a[1]).slice(0, n);
}

function limitFlag(events: number, size: number): string {
  const flags = [events > WARN_EVENTS ? 'OVER 10,240-event warning' : '', size > WARN_BYTES ? 'OVER 10 MiB warning' : ''].filter(Boolean);
  return flags.length > 0 ? `  <-- ${flags.join(', ')}` : '';
}

function printResult(r: ScaleResult): void {
  const p = `${TAG} ${r.name.padEnd(22)}`;
  console.log(`\n${p} ${r.nodes} nodes in ${r.groups} groups${r.note ? ` (${r.note})` : ''}: ${r.status}`);
  console.log(`${p} submit → all running ${fmt(r.allRunningMs)} ms (${r.jobsRunning}/${r.nodes} ran), submit → end ${fmt(r.endMs)} ms, ${fmt(r.allRunningMs / r.nodes, 1)} ms/node`);
  const m = r.milestones;
  console.log(`${p} from submit: provisioned ${fmt(m.provisioned)} ms, address book delivered ${fmt(m.addresses)}, runners ready ${fmt(m.runnersReady)}, last runJobs scheduled ${fmt(m.started)}, all running ${fmt(r.allRunningMs)}`);
  console.log(`${p} CPU: Temporal dev server ${fmt(r.cpu.serverS, 1)} s, worker ${fmt(r.cpu.workerS, 1)} s, bench client ${fmt(r.cpu.benchS, 1)} s; load average before ${fmt(r.loadBefore, 1)}`);
  console.log(`${p} workflow tasks ${fmt(r.workflowTasks)} (failed ${r.workflowTaskFailures}), activities ${fmt(r.activities)}, worker peak RSS ${fmt(r.workerPeakRssMiB)} MiB`);
  console.log(`${p} run history: ${fmt(r.parent.events)} events, ${bytes(r.parent.bytes)}, ${fmt(r.parent.signalsIn)} signals in, ${fmt(r.parent.signalsOut)} out${limitFlag(r.parent.events, r.parent.bytes)}`);
  console.log(`${p} largest child: ${fmt(r.largestChild.events)} events, ${bytes(r.largestChild.bytes)}, ${fmt(r.largestChild.signalsOut)} signals out${limitFlag(r.largestChild.events, r.largestChild.bytes)}`);
  console.log(`${p} run's commonest events: ${r.parentTopEvents.map(([k, v]) => `${k} ${fmt(v)}`).join(', ')}`);
  console.log(`${p} child's payload bytes: ${r.childTopPayloads.map(([k, v]) => `${k} ${bytes(v)}`).join(', ')}`);
  if (r.message) console.log(`${p} run's message: ${r.message.slice(0, 300)}`);
  for (const t of r.terminated) console.log(`${p} TERMINATED by the server: ${t}`);
  if (r.firstFailure) console.log(`${p} first workflow task failure: ${r.firstFailure.slice(0, 300)}`);
}

async function plot(results: ScaleResult[], holds: HoldResult[]): Promise<void> {
  // A run that did not finish has partial histories: it is named in the subtitles, not plotted.
  const finished = results.filter((r) => r.completed && r.status === 'DONE');
  const main = finished.filter((r) => r.note === null);
  const few = finished.filter((r) => r.note === 'few big groups');
  const failed = results.filter((r) => !(r.completed && r.status === 'DONE'));
  const failures = failed.length > 0 ? `not plotted: ${failed.map((r) => `${r.name} ${r.terminated.length > 0 ? `(${r.terminated[0]?.split(': ').pop()})` : `(${r.status})`}`).join(', ')}` : undefined;
  const xTicks = [...new Set(results.map((r) => r.nodes))].sort((a, b) => a - b);
  const seriesOf = (rs: ScaleResult[], label: string, f: (r: ScaleResult) => number): Series => ({
    name: label,
    points: rs.map((r) => [r.nodes, f(r)] as [number, number]).filter(([, v]) => Number.isFinite(v)),
  });
  const withFew = (label: string, f: (r: ScaleResult) => number): Series[] =>
    few.length > 0 ? [seriesOf(main, label, f), seriesOf(few, `${label}, 2 groups`, f)] : [seriesOf(main, label, f)];
  const time = lineChart({
    title: 'SIMULATED: control-plane time',
    subtitle: `nodes x groups: ${main.map((r) => `${r.nodes}x${r.groups}`).join(', ')}; 2 groups: ${few.map((r) => `${r.nodes}x${r.groups}`).join(', ')}`,
    xLabel: 'nodes',
    yLabel: 'seconds',
    logX: true,
    xTicks,
    series: [...withFew('submit -> all running', (r) => r.allRunningMs / 1000), ...withFew('submit -> end', (r) => r.endMs / 1000)],
    references: [{ label: 'target: 2,048 running < 60 s', value: 60 }],
  });
  const events = lineChart({
    title: 'SIMULATED: history events per workflow',
    ...(failures ? { subtitle: failures } : {}),
    xLabel: 'nodes',
    yLabel: 'events',
    logX: true,
    logY: true,
    xTicks,
    series: [...withFew('run', (r) => r.parent.events), ...withFew('largest child', (r) => r.largestChild.events)],
    references: [{ label: 'warning 10,240 events', value: WARN_EVENTS }, { label: 'hard limit 51,200', value: 51_200 }],
  });
  const size = lineChart({
    title: 'SIMULATED: history size per workflow',
    ...(failures ? { subtitle: failures } : {}),
    xLabel: 'nodes',
    yLabel: 'MiB',
    logX: true,
    logY: true,
    xTicks,
    series: [...withFew('run', (r) => r.parent.bytes / 2 ** 20), ...withFew('largest child', (r) => r.largestChild.bytes / 2 ** 20)],
    references: [{ label: 'warning 10 MiB', value: 10 }, { label: 'hard limit 50 MiB', value: 50 }],
  });
  const slots = stackedBarChart({
    title: 'SIMULATED: running jobs hold worker slots',
    subtitle: `a PD run submitted while ${HOLD_NODES} jobs of another run run (each holds a watchJob)`,
    unit: 'seconds from submit to all 3 PD jobs RUNNING',
    legend: ['PD run: submit -> all running'],
    rows: holds.map((h) => ({
      label: `${h.slots ?? 100} activity slots`,
      segments: [Number.isFinite(h.pdAllRunningMs) ? h.pdAllRunningMs / 1000 : 0],
      note: Number.isFinite(h.pdAllRunningMs) ? `${fmt(h.pdAllRunningMs / 1000, 1)} s` : 'not within the cap',
    })),
  });
  await writePng(join(resultsDir(), `${outputName}.png`), stackVertically(holds.length > 0 ? [time, events, size, slots] : [time, events, size]));
  console.log(`\n${TAG} wrote ${join(resultsDir(), `${outputName}.png`)} and ${outputName}.json`);
}

await main();
