/**
 * The production deployment beside the dev server, in one bench run: hop latency, launch latency
 * (local fleet) and concurrency (SIMULATED backend), each run first on its own dev server and then
 * on the Temporal 1.29.1 deployment on PostgreSQL that scripts/deploy-local.sh brings up here (four
 * service processes; a fresh state dir, removed at the end).
 *
 *   npx tsx bench/deployment.ts        (BENCH_RUNS=10 launch runs per variant, BENCH_CONCURRENT_RUNS=100)
 *
 * Prints a comparison table (also to bench/results/deployment.md); each bench's own output goes to
 * bench/results/deployment-*.log and its JSON to bench/results/*.{dev-server,deployment}.json.
 * Asserts nothing.
 */
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadAverage } from './harness/cpu';
import { resultsDir } from './harness/results';
import { fmt, median, percentile } from './harness/stats';

type Kind = 'dev-server' | 'deployment';
const repo = fileURLToPath(new URL('..', import.meta.url));
const deployDir = mkdtempSync(join(tmpdir(), 'troupe-bench-deploy-'));
const deployEnv = { ...process.env, TROUPE_DEPLOY_DIR: deployDir };
const deploy = (command: string) => execFileSync('bash', [join(repo, 'scripts', 'deploy-local.sh'), command], { env: deployEnv, encoding: 'utf8' });

/** Runs one bench to its end with `env`, its output to a log; its last JSON result is kept per kind. */
function runBench(file: string, kind: Kind, env: NodeJS.ProcessEnv, json: string | null): Promise<string> {
  const logPath = join(resultsDir(), `deployment-${file.replace('.ts', '')}-${kind}.log`);
  const log = createWriteStream(logPath);
  let output = '';
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL(file, import.meta.url))], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const take = (chunk: Buffer) => {
      output += chunk.toString();
      log.write(chunk);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.once('exit', (code) => {
      log.end();
      if (code !== 0) return reject(new Error(`${file} on the ${kind} exited ${code} (log: ${logPath})`));
      if (json) copyFileSync(join(resultsDir(), `${json}.json`), join(resultsDir(), `${json}.${kind}.json`));
      resolve(output);
    });
  });
}

interface LaunchJson {
  results: Array<{ label: string; variants: Array<{ label: string; samples: Array<{ allRunning: number; resultSeen: number; cpu: { serverS: number } }> }> }>;
}
interface ConcurrencyJson {
  workers: number;
  runsPerS: number;
  launchMs: number[];
  cpu: { serverS: number };
}

const rows: string[][] = [];
const medianOf = (text: string, label: string) => Number(new RegExp(`${label}\\s+median\\s+([\\d.]+) ms`).exec(text)?.[1] ?? Number.NaN);

async function main(): Promise<void> {
  console.log(`deployment bench: ${new Date().toISOString()}, load average ${loadAverage()}`);
  const t0 = Date.now();
  const up = deploy('up');
  const address = /Temporal frontend: (\S+)/.exec(up)?.[1];
  if (!address) throw new Error(`deploy-local up printed no address: ${up}`);
  console.log(`deployment bench: deploy-local up in ${((Date.now() - t0) / 1000).toFixed(1)} s at ${address}`);
  const envFor = (kind: Kind): NodeJS.ProcessEnv =>
    kind === 'dev-server'
      ? { ...process.env, BENCH_SSH: '0', BENCH_RUNS: process.env.BENCH_RUNS ?? '10' }
      : { ...process.env, BENCH_SSH: '0', BENCH_RUNS: process.env.BENCH_RUNS ?? '10', BENCH_TEMPORAL_ADDRESS: address, BENCH_TEMPORAL_DEPLOY_DIR: deployDir };
  try {
    for (const kind of ['dev-server', 'deployment'] as const) {
      const hops = await runBench('hop-latency.ts', kind, envFor(kind), null);
      rows.push([kind, 'hop: signal workflow → workflow', `${fmt(medianOf(hops, 'signal, workflow → workflow \\(and its task\\)'), 1)} ms`]);
      rows.push([kind, 'hop: activity scheduled → result', `${fmt(medianOf(hops, 'activity, scheduled → result in the workflow'), 1)} ms`]);
    }
    for (const kind of ['dev-server', 'deployment'] as const) {
      await runBench('launch-latency.ts', kind, envFor(kind), 'launch-latency');
      const launch = JSON.parse(readFileSync(join(resultsDir(), `launch-latency.${kind}.json`), 'utf8')) as LaunchJson;
      for (const target of launch.results) {
        const variant = target.variants[0];
        if (!variant) continue;
        const running = variant.samples.map((s) => s.allRunning);
        rows.push([kind, `launch PD, ${target.label}, ${variant.label}: submit → all RUNNING`, `p50 ${fmt(median(running))} ms, p90 ${fmt(percentile(running, 90))} ms`]);
        rows.push([kind, `launch PD, ${target.label}: server CPU per run`, `${fmt(median(variant.samples.map((s) => s.cpu.serverS * 1000)))} ms`]);
      }
    }
    for (const kind of ['dev-server', 'deployment'] as const) {
      await runBench('concurrency.ts', kind, envFor(kind), 'concurrency');
      const rounds = JSON.parse(readFileSync(join(resultsDir(), `concurrency.${kind}.json`), 'utf8')) as ConcurrencyJson[];
      for (const r of rounds) {
        rows.push([kind, `concurrency ${r.launchMs.length} PD runs, ${r.workers} worker(s) [SIMULATED]`, `${fmt(r.runsPerS, 2)} runs/s, launch p50 ${fmt(median(r.launchMs))} ms, p99 ${fmt(percentile(r.launchMs, 99))} ms, server CPU ${fmt(r.cpu.serverS, 1)} s`]);
      }
    }
  } finally {
    deploy('down');
    const pgdata = join(deployDir, 'pgdata.path');
    if (existsSync(pgdata)) rmSync(readFileSync(pgdata, 'utf8').trim(), { recursive: true, force: true });
    rmSync(deployDir, { recursive: true, force: true });
  }
  const table = ['| server | figure | value |', '|---|---|---|', ...rows.map((row) => `| ${row.join(' | ')} |`)].join('\n');
  const footer = `deployment bench: done in ${((Date.now() - t0) / 1000).toFixed(0)} s, load average ${loadAverage()}`;
  console.log(`\n${table}\n\n${footer}`);
  writeFileSync(join(resultsDir(), 'deployment.md'), `${table}\n\n${footer}\n`);
}

await main();
