/**
 * Where the launch time goes: runs the PD sample on the LOCAL fleet (loopback addresses, or network
 * namespaces with `netns` as argument) or on three SSH test hosts (`ssh`, without root's .bashrc;
 * `ssh-bashrc` with it) a few times and prints the last run's events of the run and its three
 * groups merged in time order, in ms from submit, with the step from the event before, and every
 * call into the backend when it returned, with its duration.
 *
 *   npx tsx bench/timeline.ts [loopback|netns|ssh|ssh-bashrc]   (BENCH_RUNS=5 by default; the last one is printed,
 *                                                    and with BENCH_SHOW=slowest every run slower than all before it)
 *
 * After the timeline, every run's backend calls: median and p90 per call and job.
 * A diagnostic beside bench/launch-latency.ts: it asserts nothing and writes nothing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '../src/backends/backend';
import { LocalBackend } from '../src/backends/local/local-backend';
import { createBenchSshFleet } from './harness/ssh-fleet';
import { nodeGroupWorkflowId, runWorkflowId } from '../src/contract/ids';
import type { RunState } from '../src/contract/run-state';
import { workflowCost } from './harness/history';
import { pdPlan } from './harness/plans';
import { loadAverage } from './harness/cpu';
import { median, percentile } from './harness/stats';
import { startBenchTemporal, startInProcessWorker } from './harness/temporal-env';

const MODES = ['loopback', 'netns', 'ssh', 'ssh-bashrc'] as const;
const mode = MODES.find((m) => m === process.argv[2]) ?? 'loopback';
const RUNS = Number(process.env.BENCH_RUNS ?? 5);

const env = await startBenchTemporal('timeline');
const taskQueue = `bench-timeline-${process.pid}`;
const fleetDir = mkdtempSync(join(tmpdir(), 'troupe-bench-timeline-'));
const L40S = { name: 'NVIDIA L40S', memoryMiB: 46068, count: 1 };
// The PD sample's hosts, as bench/launch-latency.ts makes them: the router's CPU host and one L40S each for prefill and decode.
const sshFleet =
  mode === 'ssh' || mode === 'ssh-bashrc'
    ? await createBenchSshFleet(
        env,
        `bench-timeline-${process.pid}`,
        taskQueue,
        ['cpu', 'l40s-a', 'l40s-b'].map((name) => ({ name, skipBashrc: mode === 'ssh', ...(name === 'cpu' ? {} : { gpus: L40S }) })),
      )
    : null;
const backend: Backend =
  sshFleet?.backend ??
  new LocalBackend({
    stateDir: fleetDir,
    network: mode === 'netns' ? 'netns' : 'loopback',
    subnet: mode === 'netns' ? '10.213.202.0/24' : '127.213.202.0/24',
    gpus: 1,
    releaseGraceSeconds: 1,
  });
/** Every call of these into the backend, with its start and end, shown in the timeline beside the events. */
const TRACED = new Set(['provision', 'runnerReady', 'startJob', 'stopJob', 'releaseRun', 'exec']);
const calls: Array<{ name: string; what: string; start: number; end: number }> = [];
/** Every run's backend call durations, by call and job (`startJob job 1`), for the summary after the timeline. */
const durations = new Map<string, number[]>();
const traced = new Proxy(backend, {
  get(target, key, receiver) {
    const value: unknown = Reflect.get(target, key, receiver);
    if (typeof value !== 'function' || typeof key !== 'string' || !TRACED.has(key)) return value;
    return async (...args: unknown[]) => {
      const start = Date.now();
      try {
        return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      } finally {
        calls.push({ name: key, what: describeCall(args), start, end: Date.now() });
      }
    };
  },
});
function describeCall(args: unknown[]): string {
  const first = args[0] as { job_name?: string; jobs?: Array<{ job_name: string }> } | undefined;
  return first?.job_name ?? first?.jobs?.map((j) => j.job_name).join(',') ?? '';
}
const worker = await startInProcessWorker(env, taskQueue, { [backend.kind]: traced });
let worst = 0;
try {
  await sshFleet?.apply();
  for (let i = 1; i <= RUNS; i++) {
    const runName = `bench-timeline-${process.pid}-${i}`;
    const pd = pdPlan(runName, 'sleep 1');
    // On the SSH fleet: the run names it, and asks for less disk than the default 100 GB.
    const plan = sshFleet ? { ...pd, fleets: [sshFleet.fleetName], groups: pd.groups.map((g) => ({ ...g, resources: { ...g.resources, disk: { min: 1, max: null } } })) } : pd;
    const runId = runWorkflowId(runName);
    calls.length = 0;
    const t0 = Date.now();
    const handle = await env.client.workflow.start('RunWorkflow', {
      taskQueue,
      workflowId: runId,
      args: [{ plan, backend: backend.kind, options: { stop_grace_s: 1 } }],
    });
    const state = (await handle.result()) as RunState;
    for (const c of calls) {
      const key = `${c.name} ${c.what.replace(/^.*-(\d+)-\d+$/, 'job $1')}`;
      durations.set(key, [...(durations.get(key) ?? []), c.end - c.start]);
    }
    const allRunning = Math.max(...state.jobs.map((j) => Date.parse(j.running_at ?? ''))) - t0;
    console.log(`run ${i}: ${state.status}, all running after ${allRunning} ms`);
    const slowest = allRunning > worst;
    worst = Math.max(worst, allRunning);
    if (i < RUNS && !(process.env.BENCH_SHOW === 'slowest' && slowest)) continue;
    const costs = await Promise.all([runId, ...plan.groups.map((g) => nodeGroupWorkflowId(runId, g.name, 0))].map((id) => workflowCost(env.client, id)));
    const rows = costs.flatMap((cost, k) =>
      cost.timeline.map((e) => ({ who: k === 0 ? 'run' : (plan.groups[k - 1]?.name ?? '?'), what: e.name ? `${e.kind} ${e.name}` : e.kind, at: e.timeMs - t0 })),
    );
    rows.push(...state.jobs.map((j) => ({ who: 'state', what: `job ${j.job_num} RUNNING`, at: Date.parse(j.running_at ?? '') - t0 })));
    rows.push(...calls.map((c) => ({ who: 'backend', what: `${c.name} ${c.what} (${c.end - c.start} ms, began at ${c.start - t0})`, at: c.end - t0 })));
    rows.sort((a, b) => a.at - b.at);
    let previous = 0;
    for (const row of rows) {
      if (row.at > allRunning + 50) break;
      console.log(`${String(row.at).padStart(6)} ms  +${String(row.at - previous).padStart(4)}  ${row.who.padEnd(8)} ${row.what}`);
      previous = row.at;
    }
  }
  console.log(`\nbackend calls over ${RUNS} runs, ms (load average ${loadAverage()}):`);
  for (const [key, ms] of [...durations].sort(([a], [b]) => a.localeCompare(b))) {
    console.log(`  ${key.padEnd(36)} median ${String(median(ms)).padStart(4)}  p90 ${String(percentile(ms, 90)).padStart(4)}  (${ms.length})`);
  }
} finally {
  await sshFleet?.remove();
  await worker.stop();
  await sshFleet?.destroy();
  await env.close();
  rmSync(fleetDir, { recursive: true, force: true });
}
// Done once the timeline is printed: an SSH connection to a test host destroyed before it answered
// our close (BENCHMARKS, section 6) must not keep the bench, and the shared SSH hosts' lock, alive.
process.exit(0);
