/**
 * Real nodes on the local fleet (loopback addresses, isolation as the machine allows: on as root),
 * each a `sleep infinity` in 3 groups, beside a floor: a shell script that starts and kills the
 * same number of `sleep`s. Per size: submit → all RUNNING, stop → torn down (the run closed), the
 * worker's CPU seconds and peak RSS, its peak open file descriptors (sampled every 50 ms), and the
 * run workflow's history events and bytes. The worker runs in its own process.
 *
 *   npx tsx bench/scale-real.ts              100, 300 and 1000 nodes
 *   npx tsx bench/scale-real.ts 1000         chosen sizes
 *
 * Prints figures. Asserts nothing. The isolated floor (unshare + setpriv per node) is not measured.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { withAllJobs } from '../src/client/run-jobs';
import { runWorkflowId } from '../workflows/ids';
import { runJobsQuery, runStateQuery, stopRunSignal } from '../workflows/messages';
import type { RunState } from '../workflows/run-state';
import { cpuSeconds } from './harness/cpu';
import { workflowCost } from './harness/history';
import { spreadPlan } from './harness/plans';
import { bytes, fmt } from './harness/stats';
import { startBenchTemporal } from './harness/temporal-env';
import { startWorkerProcess } from './harness/worker-process';

const sizes = process.argv.slice(2).map(Number).filter((n) => Number.isInteger(n) && n > 0);
const SIZES = sizes.length > 0 ? sizes : [100, 300, 1000];

function openFiles(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return 0;
  }
}

/** The floor: `n` sleeps in sessions of their own started by one bash, then killed; ms for each. */
function floor(n: number): { startMs: number; stopMs: number } {
  const script = [
    `t0=$(date +%s%N); for ((i = 0; i < ${n}; i++)); do setsid sleep infinity < /dev/null > /dev/null 2>&1 & pids+=($!); done; t1=$(date +%s%N)`,
    'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; t2=$(date +%s%N)',
    'echo $(((t1 - t0) / 1000000)) $(((t2 - t1) / 1000000))',
  ].join('\n');
  const [startMs, stopMs] = execFileSync('bash', ['-c', script], { encoding: 'utf8' }).trim().split(' ').map(Number);
  return { startMs: startMs ?? Number.NaN, stopMs: stopMs ?? Number.NaN };
}

const env = await startBenchTemporal('scale-real');
const rows: string[][] = [];
try {
  for (const n of SIZES) {
    const stateDir = mkdtempSync(join(tmpdir(), 'troupe-bench-scale-real-'));
    const taskQueue = `scale-real-${n}-${Date.now()}`;
    const worker = await startWorkerProcess({
      address: env.address,
      task_queue: taskQueue,
      bundle_path: env.bundlePath,
      backend: { kind: 'local', state_dir: stateDir, network: 'loopback', ...(n > 1022 ? { subnet: '127.216.0.0/18' } : {}) },
    });
    let peakFds = 0;
    const sampler = setInterval(() => {
      peakFds = Math.max(peakFds, openFiles(worker.pid));
    }, 50);
    try {
      const runName = `scale-real-${n}`;
      const cpu0 = cpuSeconds(worker.pid);
      const submitted = Date.now();
      const handle = await env.client.workflow.start('RunWorkflow', {
        taskQueue,
        workflowId: runWorkflowId(runName),
        args: [{ plan: spreadPlan(runName, n, 3, ['sleep infinity']), backend: 'local', options: { stop_grace_s: 1 } }],
      });
      for (;;) {
        const state = await withAllJobs(await handle.query(runStateQuery), (offset, limit) => handle.query(runJobsQuery, { offset, limit }));
        if (state.jobs.length === n && state.jobs.every((j) => j.status === 'RUNNING')) break;
        if (['FAILED', 'TERMINATED', 'DONE'].includes(state.status)) throw new Error(`${n} nodes: the run ended ${state.status}: ${state.message ?? ''}`);
        await sleep(250);
      }
      const running = Date.now() - submitted;
      const cpuRunning = cpuSeconds(worker.pid) - cpu0;
      // Holding the jobs: worker CPU per job per second over 10 s.
      const cpuHold0 = cpuSeconds(worker.pid);
      await sleep(10_000);
      const holdMsPerJobSecond = ((cpuSeconds(worker.pid) - cpuHold0) * 1000) / n / 10;
      const stopping = Date.now();
      await handle.signal(stopRunSignal, { abort: false });
      const final = (await handle.result()) as RunState;
      const down = Date.now() - stopping;
      const cost = await workflowCost(env.client, runWorkflowId(runName));
      const f = floor(n);
      rows.push([
        String(n),
        `${fmt(running / 1000, 1)} s`,
        `${fmt(down / 1000, 1)} s`,
        `${fmt(f.startMs / 1000, 2)} s / ${fmt(f.stopMs / 1000, 2)} s`,
        `${fmt(cpuRunning, 1)} s`,
        fmt(holdMsPerJobSecond, 3),
        `${fmt(worker.peakRssMiB())} MiB`,
        String(peakFds),
        `${cost.events} / ${bytes(cost.bytes)}`,
        final.status,
      ]);
      console.log(rows.at(-1)?.join('  '));
    } finally {
      clearInterval(sampler);
      await worker.stop();
      rmSync(stateDir, { recursive: true, force: true });
    }
  }
} finally {
  await env.close();
}
const header = ['nodes', 'submit → all RUNNING', 'stop → torn down', 'floor start / kill', 'worker CPU to RUNNING', 'hold: worker CPU ms/job/s', 'worker peak RSS', 'worker peak fds', 'run history events / bytes', 'status'];
console.log(`\nLocal fleet, loopback, real processes (isolation ${process.getuid?.() === 0 ? 'on' : 'off'}):`);
console.log(`| ${header.join(' | ')} |\n|${header.map(() => '---').join('|')}|`);
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
