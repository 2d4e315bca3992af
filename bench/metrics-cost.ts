/**
 * What the worker's metrics cost: the seed's 3-group PD sample (bench/launch-latency.ts's runs) on
 * the LOCAL fleet, submitted to two worker processes alike but for one thing — one serves its
 * metrics as `troupe worker --metrics` does (Troupe's endpoint, the SDK's Prometheus exporter, job
 * usage read every TROUPE_USAGE_INTERVAL_S, default 5 s) and is scraped every second; the other
 * serves none. Runs alternate between them, the order flipped each round, so drift hits both alike.
 *
 *   npx tsx bench/metrics-cost.ts            (BENCH_RUNS=20 per side by default)
 *
 * Prints submit → all RUNNING and submit → end (median, p90) for each side, their ratio and each
 * worker's CPU per run; writes bench/results/metrics-cost.json. Asserts nothing. Target: metrics
 * on adds ≤ 5 % to the median to all RUNNING.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { netnsAvailable } from '../src/backends/local/netns';
import { runWorkflowId } from '../src/contract/ids';
import type { RunState } from '../src/contract/run-state';
import { freePort } from '../test/helpers/free-port';
import { cpuSeconds, loadAverage } from './harness/cpu';
import { pdPlan } from './harness/plans';
import { resultsDir } from './harness/results';
import { fmt, median, percentile } from './harness/stats';
import { startBenchTemporal, type BenchTemporal } from './harness/temporal-env';
import { startWorkerProcess, type WorkerProcess } from './harness/worker-process';

const RUNS = Number(process.env.BENCH_RUNS ?? 20);
const WARMUP = 2;
/** The PD servers replaced by a tiny process, as in bench/launch-latency.ts. */
const WORK = 'sleep 1';
/** Prometheus's scrape interval in the e2e tests; a deployment's is usually 15 s or more. */
const SCRAPE_MS = 1_000;
const TARGET_ADDED = 0.05;

interface Sample {
  allRunning: number;
  end: number;
  /** CPU seconds the side's worker process used during the run. */
  workerCpuS: number;
}

interface Side {
  label: string;
  taskQueue: string;
  worker: WorkerProcess;
  stateDir: string;
  samples: Sample[];
}

async function startSide(env: BenchTemporal, label: string, network: 'netns' | 'loopback', subnet: string, metrics: string | null): Promise<Side> {
  const stateDir = mkdtempSync(join(tmpdir(), 'troupe-bench-metrics-cost-'));
  const taskQueue = `bench-metrics-cost-${metrics ? 'on' : 'off'}-${process.pid}`;
  const worker = await startWorkerProcess({
    address: env.address,
    task_queue: taskQueue,
    bundle_path: env.bundlePath,
    backend: { kind: 'local', state_dir: stateDir, network, subnet, gpus: 1, release_grace_s: 1 },
    ...(metrics ? { metrics } : {}),
  });
  return { label, taskQueue, worker, stateDir, samples: [] };
}

async function measureRun(env: BenchTemporal, side: Side, runName: string): Promise<Sample> {
  const cpuBefore = cpuSeconds(side.worker.pid);
  const t0 = Date.now();
  const handle = await env.client.workflow.start('RunWorkflow', {
    taskQueue: side.taskQueue,
    workflowId: runWorkflowId(runName),
    args: [{ plan: pdPlan(runName, WORK), backend: 'local', options: { stop_grace_s: 1 } }],
  });
  const state = (await handle.result()) as RunState;
  const end = Date.now() - t0;
  if (state.status !== 'DONE') throw new Error(`run ${runName} ended ${state.status}: ${state.message}`);
  const allRunning = Math.max(...state.jobs.map((j) => Date.parse(j.running_at ?? ''))) - t0;
  return { allRunning, end, workerCpuS: cpuSeconds(side.worker.pid) - cpuBefore };
}

async function main(): Promise<void> {
  const env = await startBenchTemporal('metrics-cost');
  const network = (await netnsAvailable()) ? 'netns' : 'loopback';
  const metricsPort = await freePort();
  const sides: Side[] = [];
  let scraper: NodeJS.Timeout | null = null;
  let scrapes = 0;
  let failedScrapes = 0;
  const loadBefore = loadAverage();
  try {
    // Subnets of their own, apart from launch-latency's (10.213.200-201) and the tests'.
    const prefix = network === 'netns' ? '10.213' : '127.213';
    sides.push(await startSide(env, 'metrics off', network, `${prefix}.202.0/24`, null));
    sides.push(await startSide(env, `metrics on (scraped every ${SCRAPE_MS / 1000} s)`, network, `${prefix}.203.0/24`, `127.0.0.1:${metricsPort}`));
    scraper = setInterval(() => {
      fetch(`http://127.0.0.1:${metricsPort}/metrics`)
        .then((r) => r.text())
        .then(() => scrapes++, () => failedScrapes++);
    }, SCRAPE_MS);
    console.log(`metrics-cost: Temporal: ${env.kind}; LOCAL ${network}; ${RUNS} runs per side after ${WARMUP} warm-up rounds; job command \`${WORK}\``);
    let counter = 0;
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const order = i % 2 === 0 ? sides : [...sides].reverse();
      for (const side of order) {
        const sample = await measureRun(env, side, `bench-metrics-cost-${process.pid}-${++counter}`);
        if (i >= WARMUP) side.samples.push(sample);
      }
      process.stdout.write(i < WARMUP ? 'w' : '.');
    }
    process.stdout.write('\n');
  } finally {
    if (scraper) clearInterval(scraper);
    for (const side of sides) {
      await side.worker.stop();
      rmSync(side.stateDir, { recursive: true, force: true });
    }
    await env.close();
  }
  const load = { before: loadBefore, after: loadAverage() };
  report(sides, load, network, { scrapes, failedScrapes });
  writeFileSync(
    join(resultsDir(), 'metrics-cost.json'),
    `${JSON.stringify({ runs: RUNS, work: WORK, network, scrape_ms: SCRAPE_MS, load_average: load, sides: sides.map(({ label, samples }) => ({ label, samples })) }, null, 2)}\n`,
  );
}

function report(sides: Side[], load: { before: number; after: number }, network: string, scraped: { scrapes: number; failedScrapes: number }): void {
  const line = (label: string, xs: number[]) => `${label.padEnd(24)} median ${fmt(median(xs)).padStart(6)} ms   p90 ${fmt(percentile(xs, 90)).padStart(6)} ms`;
  console.log(`\n[LOCAL ${network}] load average ${fmt(load.before, 1)} before, ${fmt(load.after, 1)} after (other work may share the cores)`);
  for (const side of sides) {
    console.log(`[${side.label}] n=${side.samples.length}`);
    console.log(`  ${line('submit → all RUNNING', side.samples.map((s) => s.allRunning))}`);
    console.log(`  ${line('submit → end', side.samples.map((s) => s.end))}`);
    console.log(`  worker CPU per run (median) ${fmt(median(side.samples.map((s) => s.workerCpuS * 1000)))} ms`);
  }
  const [off, on] = sides;
  if (!off || !on) return;
  const ratio = (f: (s: Sample) => number, p: number) => percentile(on.samples.map(f), p) / percentile(off.samples.map(f), p);
  const added = ratio((s) => s.allRunning, 50) - 1;
  console.log(`\nmetrics on / off: all RUNNING ×${fmt(ratio((s) => s.allRunning, 50), 3)} (median), ×${fmt(ratio((s) => s.allRunning, 90), 3)} (p90); end ×${fmt(ratio((s) => s.end, 50), 3)} (median)`);
  console.log(`added to all RUNNING (median): ${added >= 0 ? '+' : ''}${fmt(added * 100, 1)} %   target ≤ ${fmt(TARGET_ADDED * 100)} %`);
  console.log(`scrapes of the endpoint: ${scraped.scrapes} answered, ${scraped.failedScrapes} failed`);
}

await main();
process.exit(0);
