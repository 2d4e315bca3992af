/**
 * Many runs at once: 100 runs of the PD sample (3 groups, workers-first) submitted together, on
 * the SIMULATED backend (nothing provisioned or run; job state shared in tmpfs so that several
 * worker processes see the same jobs). First one worker process, then two on the same task queue.
 *
 *   npx tsx bench/concurrency.ts               (BENCH_CONCURRENT_RUNS=100 by default)
 *
 * Prints throughput and p50/p99 launch latency; writes bench/results/concurrency.{png,json}.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runWorkflowId } from '../src/contract/ids';
import type { RunState } from '../src/contract/run-state';
import { cpuSeconds, loadAverage } from './harness/cpu';
import { pdPlan } from './harness/plans';
import { resultsDir } from './harness/results';
import { fmt, median, percentile } from './harness/stats';
import { startBenchTemporal, type BenchTemporal } from './harness/temporal-env';
import { startWorkerProcess, type WorkerProcess } from './harness/worker-process';
import { lineChart, stackedBarChart, stackVertically, writePng } from './plot/charts';

const TAG = '[SIMULATED]';
const RUNS = Number(process.env.BENCH_CONCURRENT_RUNS ?? 100);
/** Simulated jobs end at their first check: this measures the control plane, not job run time. */
const JOB_DURATION_MS = 0;
const CAP_S = 240;

interface RoundResult {
  workers: number;
  runs: number;
  done: number;
  wallS: number;
  runsPerS: number;
  jobsStartedPerS: number;
  launchMs: number[];
  endMs: number[];
  cpu: { serverS: number; workersS: number };
  workerPeakRssMiB: number[];
  loadBefore: number;
}

async function main(): Promise<void> {
  // BENCH_PLOT_ONLY=1: the figure again from the last results, nothing measured.
  if (process.env.BENCH_PLOT_ONLY === '1') return await plot(JSON.parse(readFileSync(join(resultsDir(), 'concurrency.json'), 'utf8')) as RoundResult[]);
  console.log(`${TAG} concurrency: ${RUNS} PD runs at once (3 jobs each), SIMULATED backend, jobs end at once`);
  const env = await startBenchTemporal('concurrency');
  console.log(`concurrency: Temporal: ${env.kind}`);
  const shared = mkdtempSync('/dev/shm/troupe-bench-sim-');
  const rounds: RoundResult[] = [];
  try {
    for (const workers of [1, 2]) {
      const round = await runRound(env, shared, workers);
      rounds.push(round);
      printRound(round);
    }
  } finally {
    await env.close();
    rmSync(shared, { recursive: true, force: true });
  }
  writeFileSync(join(resultsDir(), 'concurrency.json'), `${JSON.stringify(rounds, null, 2)}\n`);
  await plot(rounds);
}

async function runRound(env: BenchTemporal, sharedDir: string, workerCount: number): Promise<RoundResult> {
  const taskQueue = `bench-concurrency-${workerCount}-${process.pid}`;
  const workers: WorkerProcess[] = [];
  for (let i = 0; i < workerCount; i++) {
    workers.push(
      await startWorkerProcess({
        address: env.address,
        task_queue: taskQueue,
        bundle_path: env.bundlePath,
        backend: { kind: 'shared-simulated', dir: sharedDir, job_duration_ms: JOB_DURATION_MS },
      }),
    );
  }
  const loadBefore = loadAverage();
  const cpuBefore = { server: env.serverCpuSeconds(), workers: workers.map((w) => cpuSeconds(w.pid)) };
  try {
    const tStart = Date.now();
    const outcomes = await Promise.all(
      Array.from({ length: RUNS }, async (_, i) => {
        const runName = `conc-${workerCount}w-${i}-${process.pid}`;
        const t0 = Date.now();
        const handle = await env.client.workflow.start('RunWorkflow', {
          taskQueue,
          workflowId: runWorkflowId(runName),
          args: [{ plan: pdPlan(runName, 'true'), backend: 'simulated', options: { stop_grace_s: 0 } }],
        });
        const state = (await Promise.race([
          handle.result(),
          new Promise((resolve) => setTimeout(resolve, CAP_S * 1000).unref()).then(() => null),
        ])) as RunState | null;
        const end = Date.now();
        if (!state) return null;
        const running = Math.max(...state.jobs.map((j) => Date.parse(j.running_at ?? ''))) - t0;
        return { launch: running, end: end - t0, done: state.status === 'DONE' };
      }),
    );
    const wallS = (Date.now() - tStart) / 1000;
    const finished = outcomes.filter((o): o is NonNullable<typeof o> => o !== null);
    return {
      workers: workerCount,
      runs: RUNS,
      done: finished.filter((o) => o.done).length,
      wallS,
      runsPerS: finished.length / wallS,
      jobsStartedPerS: (finished.length * 3) / (Math.max(...finished.map((o) => o.launch)) / 1000),
      launchMs: finished.map((o) => o.launch),
      endMs: finished.map((o) => o.end),
      cpu: {
        serverS: env.serverCpuSeconds() - cpuBefore.server,
        workersS: workers.reduce((a, w, i) => a + cpuSeconds(w.pid) - (cpuBefore.workers[i] ?? 0), 0),
      },
      workerPeakRssMiB: workers.map((w) => w.peakRssMiB()),
      loadBefore,
    };
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
}

function printRound(r: RoundResult): void {
  const p = `${TAG} ${r.workers} worker${r.workers > 1 ? 's' : ' '}`;
  console.log(`\n${p}: ${r.done}/${r.runs} runs DONE in ${fmt(r.wallS, 1)} s → ${fmt(r.runsPerS, 2)} runs/s, ${fmt(r.jobsStartedPerS, 1)} jobs started/s`);
  console.log(`${p}: launch latency (submit → all 3 RUNNING) p50 ${fmt(median(r.launchMs))} ms, p90 ${fmt(percentile(r.launchMs, 90))} ms, p99 ${fmt(percentile(r.launchMs, 99))} ms`);
  console.log(`${p}: submit → result p50 ${fmt(median(r.endMs))} ms, p99 ${fmt(percentile(r.endMs, 99))} ms`);
  console.log(`${p}: CPU Temporal server ${fmt(r.cpu.serverS, 1)} s, worker${r.workers > 1 ? 's' : ''} ${fmt(r.cpu.workersS, 1)} s; peak RSS ${r.workerPeakRssMiB.map((m) => `${fmt(m)} MiB`).join(' + ')}; load average before ${fmt(r.loadBefore, 1)}`);
}

async function plot(rounds: RoundResult[]): Promise<void> {
  const bars = stackedBarChart({
    title: `SIMULATED: ${RUNS} PD runs at once`,
    subtitle: 'launch latency = submit -> all 3 jobs RUNNING, per run',
    unit: 'ms',
    legend: ['p50', 'p50 -> p99'],
    rows: rounds.map((r) => ({
      label: `${r.workers} worker${r.workers > 1 ? 's' : ''}, ${fmt(r.runsPerS, 2)} runs/s`,
      segments: [median(r.launchMs), percentile(r.launchMs, 99) - median(r.launchMs)],
      note: `p99 ${fmt(percentile(r.launchMs, 99))} ms`,
    })),
  });
  const sorted = lineChart({
    title: 'SIMULATED: launch latency of every run (sorted)',
    xLabel: 'run (sorted)',
    yLabel: 'ms',
    series: rounds.map((r) => ({
      name: `${r.workers} worker${r.workers > 1 ? 's' : ''}`,
      points: [...r.launchMs].sort((a, b) => a - b).map((v, i) => [i + 1, v] as [number, number]),
    })),
  });
  await writePng(join(resultsDir(), 'concurrency.png'), stackVertically([bars, sorted]));
  console.log(`\n${TAG} wrote ${join(resultsDir(), 'concurrency.png')} and concurrency.json`);
}

await main();
