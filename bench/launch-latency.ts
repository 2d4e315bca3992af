/**
 * Launch latency of the seed's 3-group PD sample on the LOCAL fleet (real processes, real network
 * namespaces when root): submit → every job RUNNING and submit → run end, beside the floor — the
 * same commands started directly with spawn — measured in the same process, interleaved.
 *
 *   npx tsx bench/launch-latency.ts            (BENCH_RUNS=20 runs by default)
 *
 * Prints figures, writes bench/results/launch-latency.{png,json}. Asserts nothing.
 * Targets: the local fleet (network namespaces, then loopback) and three SSH test hosts, with and
 * without root's .bashrc (BENCH_SSH=0 skips SSH, BENCH_SSH=bashrc or nobashrc measures only that one,
 * BENCH_LOCAL=0 the local fleet).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalBackend } from '../src/backends/local/local-backend';
import { nodeLinkNames, type NodeLinkNames } from '../src/backends/local/local-names';
import { ensureNodeNetwork, netnsAvailable, removeNodeNetwork } from '../src/backends/local/netns';
import type { Plan } from '../src/plan/plan-schema';
import type { TestHosts } from '../test/e2e/hosts';
import { nodeGroupWorkflowId, runWorkflowId } from '../src/contract/ids';
import type { RunOptionsInput } from '../src/contract/messages';
import type { RunState } from '../src/contract/run-state';
import { firstEvent, lastEvent, lastEventOf, workflowCost, type WorkflowCost } from './harness/history';
import type { BackendRegistry } from '../activities/types';
import { cpuSeconds, loadAverage } from './harness/cpu';
import { DECODE_IP, PREFILL_IP, pdCommands, pdPlan } from './harness/plans';
import { fmt, median, percentile } from './harness/stats';
import { startBenchTemporal, startInProcessWorker, type BenchTemporal } from './harness/temporal-env';
import { stackedBarChart, stackVertically, lineChart, writePng } from './plot/charts';
import { resultsDir } from './harness/results';
import { createBenchSshFleet } from './harness/ssh-fleet';

const RUNS = Number(process.env.BENCH_RUNS ?? 20);
const WARMUP = 2;
/** The PD servers replaced by a tiny process. */
const WORK = 'sleep 1';
/** Issue 7's targets: 300 ms to all running on the local fleet; under 2× the parallel-ssh floor over SSH. */
const TARGET_MS = 300;
const SSH_TARGET_RATIO = 2;
const isSsh = (label: string) => label.startsWith('SSH');
/** The target in ms for a target's results (over SSH, twice its floor's median). */
function targetMs(result: TargetResult): number {
  if (!isSsh(result.label)) return TARGET_MS;
  return SSH_TARGET_RATIO * median((result.floors[0]?.samples ?? []).map((f) => f.allRunning));
}
function targetText(result: TargetResult): string {
  return isSsh(result.label) ? `target < ${SSH_TARGET_RATIO}× the floor = ${fmt(targetMs(result))} ms` : `target < ${TARGET_MS} ms`;
}

interface Variant {
  label: string;
  startupOrder: Plan['startup_order'];
  options: RunOptionsInput;
}

/** The sample as written (workers-first). More variants (another startup order, a shorter watch interval) go here. */
const VARIANTS: Variant[] = [{ label: 'Troupe, workers-first (the sample)', startupOrder: 'workers-first', options: {} }];

/** A fleet to measure: the backend runs use, and the floors measured beside them. */
interface FleetTarget {
  /** Printed on every line, e.g. `LOCAL netns`. */
  label: string;
  /** The backend's name in the worker's registry (what a run asks for). */
  backend: string;
  registry: BackendRegistry;
  floors: Array<{ label: string; measure(iteration: number): Promise<FloorSample> }>;
  /** Called once the target's worker polls its task queue (an SSH fleet is applied here). */
  prepare?(): Promise<void>;
  /** Called while the worker still polls, after the last run (the SSH fleet is deleted: its workflow needs the worker). */
  release?(): Promise<void>;
  /** The run's plan for this fleet (an SSH run names its fleet). */
  adaptPlan?(plan: Plan): Plan;
  cleanup(): Promise<void>;
}

/** Milliseconds from submit to each milestone of one run. */
interface TroupeSample {
  workflowStarted: number;
  childrenStarted: number;
  provisionDone: number;
  lastProvisioned: number;
  addressesDelivered: number;
  runnersReady: number;
  lastMayStart: number;
  lastBatchScheduled: number;
  allRunning: number;
  lastExitedReported: number;
  finished: number;
  resultSeen: number;
  events: { parent: number; children: number; workflowTasks: number; activities: number; signals: number };
  /** CPU seconds of the Temporal server and of this process (client + in-process worker) during the run. */
  cpu: { serverS: number; benchS: number };
}

interface FloorSample {
  allRunning: number;
  end: number;
}

async function main(): Promise<void> {
  // BENCH_PLOT_ONLY=1: the figure again from the last results, nothing measured.
  if (process.env.BENCH_PLOT_ONLY === '1') return await plot((JSON.parse(readFileSync(join(resultsDir(), 'launch-latency.json'), 'utf8')) as { results: TargetResult[] }).results);
  const env = await startBenchTemporal('launch');
  console.log(`launch-latency: Temporal: ${env.kind}`);
  // Loopback beside netns: the same runs without namespaces, to tell orchestration from network set-up.
  const netns = await netnsAvailable();
  const targets: Array<() => Promise<FleetTarget>> = [
    ...(process.env.BENCH_LOCAL === '0' ? [] : [...(netns ? [() => localFleetTarget('netns')] : []), () => localFleetTarget('loopback')]),
    // Root's .bashrc on these hosts runs `pyenv init`: measured as the hosts are, and without it.
    // BENCH_SSH=bashrc or nobashrc: only that one.
    ...(netns && process.env.BENCH_SSH !== '0' && process.env.BENCH_SSH !== 'nobashrc' ? [() => sshFleetTarget(env, true)] : []),
    ...(netns && process.env.BENCH_SSH !== '0' && process.env.BENCH_SSH !== 'bashrc' ? [() => sshFleetTarget(env, false)] : []),
  ];
  if (!netns) console.log('launch-latency: SSH fleet NOT measured: its test hosts need root and network namespaces');
  const results: TargetResult[] = [];
  try {
    for (const make of targets) {
      const target = await make();
      try {
        const result = await measureTarget(env, target);
        results.push(result);
        // Printed as each fleet is done: a later one that fails does not take these figures with it.
        report(result);
      } finally {
        await target.cleanup();
      }
    }
  } finally {
    await env.close();
  }
  writeFileSync(join(resultsDir(), 'launch-latency.json'), `${JSON.stringify({ runs: RUNS, work: WORK, results }, null, 2)}\n`);
  await plot(results);
}

interface TargetResult {
  label: string;
  loadAverage: { before: number; after: number };
  floors: Array<{ label: string; samples: FloorSample[] }>;
  variants: Array<{ label: string; samples: TroupeSample[] }>;
}

const taskQueueFor = (label: string) => `bench-launch-${label.replace(/\W+/g, '-')}-${process.pid}`;

/** Floors and Troupe runs interleaved (floor, floor, each variant, repeat) so drift hits all alike. */
async function measureTarget(env: BenchTemporal, target: FleetTarget): Promise<TargetResult> {
  console.log(`launch-latency: ${target.label}, ${RUNS} runs per variant after ${WARMUP} warm-up rounds; job command: \`${WORK}\``);
  const taskQueue = taskQueueFor(target.label);
  const worker = await startInProcessWorker(env, taskQueue, target.registry);
  await target.prepare?.();
  const floors = target.floors.map((f) => ({ label: f.label, samples: [] as FloorSample[] }));
  const variants = VARIANTS.map((v) => ({ label: v.label, samples: [] as TroupeSample[] }));
  const loadBefore = loadAverage();
  let counter = 0;
  try {
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const warm = i < WARMUP;
      for (const [k, floor] of target.floors.entries()) {
        const sample = await floor.measure(i);
        if (!warm) floors[k]?.samples.push(sample);
      }
      for (const [k, variant] of VARIANTS.entries()) {
        const sample = await measureTroupe(env, taskQueue, target, variant, `bench-pd-${target.label.replace(/\W+/g, '-')}-${process.pid}-${++counter}`);
        if (!warm) variants[k]?.samples.push(sample);
      }
      process.stdout.write(warm ? 'w' : '.');
    }
    process.stdout.write('\n');
  } finally {
    await target.release?.();
    await worker.stop();
  }
  return { label: target.label, loadAverage: { before: loadBefore, after: loadAverage() }, floors, variants };
}

/** The local fleet: real processes, each node in its own network namespace (root) or on its own loopback address. */
async function localFleetTarget(mode: 'netns' | 'loopback'): Promise<FleetTarget> {
  const netns = mode === 'netns';
  const fleetDir = mkdtempSync(join(tmpdir(), 'troupe-bench-fleet-'));
  // A subnet of its own, so the bench's addresses never meet those of tests running beside it.
  const backend = new LocalBackend({
    stateDir: fleetDir,
    network: mode,
    subnet: netns ? '10.213.200.0/24' : '127.213.200.0/24',
    gpus: 1,
    releaseGraceSeconds: 1,
  });
  const persistent = netns ? await floorNamespaces('persistent') : null;
  const floors: FleetTarget['floors'] = [
    { label: netns ? 'floor: spawn (ip netns exec)' : 'floor: spawn', measure: () => measureFloor(persistent) },
  ];
  if (netns) {
    floors.push({ label: 'floor: netns + spawn', measure: async (i) => measureFloor(await floorNamespaces(`fresh-${i}`, false), true) });
  }
  return {
    label: `LOCAL ${mode}`,
    backend: 'local',
    registry: { local: backend },
    floors,
    cleanup: async () => {
      if (persistent) await Promise.all(persistent.map((n) => removeNodeNetwork(n.names)));
      rmSync(fleetDir, { recursive: true, force: true });
    },
  };
}

/**
 * Three SSH test hosts (sshd in network namespaces, test/e2e/hosts: a CPU host and two with a fake
 * L40S) as one fleet, applied through the fleet's workflow as `troupe fleet apply` does. `bashrc`:
 * root's .bashrc runs in every SSH session (as the hosts are here: `pyenv init`), or is skipped.
 * The floor: the same PD commands over three new `ssh` sessions, workers first, then the router
 * once both workers' commands have started.
 */
async function sshFleetTarget(env: BenchTemporal, bashrc: boolean): Promise<FleetTarget> {
  const L40S = { name: 'NVIDIA L40S', memoryMiB: 46068, count: 1 };
  const label = `SSH ${bashrc ? "with root's .bashrc (pyenv init)" : 'without .bashrc'}`;
  const fleet = await createBenchSshFleet(
    env,
    `bench-ssh-${bashrc ? 'bashrc' : 'nobashrc'}-${process.pid}`,
    taskQueueFor(label),
    ['cpu', 'l40s-a', 'l40s-b'].map((name) => ({ name, skipBashrc: !bashrc, ...(name === 'cpu' ? {} : { gpus: L40S }) })),
  );
  return {
    label,
    backend: 'ssh',
    registry: { ssh: fleet.backend },
    floors: [{ label: `floor: 3 parallel ssh sessions, ${bashrc ? 'with' : 'without'} .bashrc`, measure: () => measureSshFloor(fleet.hosts) }],
    prepare: () => fleet.apply(),
    adaptPlan: (plan) => ({
      ...plan,
      fleets: [fleet.fleetName],
      groups: plan.groups.map((g) => ({ ...g, resources: { ...g.resources, disk: { min: 1, max: null } } })),
    }),
    release: () => fleet.remove(),
    cleanup: () => fleet.destroy(),
  };
}

/** The PD commands over three new ssh sessions: a worker counts as running when its first line arrives. */
async function measureSshFloor(hosts: TestHosts): Promise<FloorSample> {
  const [cpu, a, b] = ['cpu', 'l40s-a', 'l40s-b'].map((n) => hosts.host(n));
  if (!cpu || !a || !b) throw new Error('hosts missing');
  const commands = pdCommands(WORK);
  const script = (lines: string[]) => ['echo started', ...lines].join('\n').replaceAll(PREFILL_IP, a.address).replaceAll(DECODE_IP, b.address);
  const t0 = performance.now();
  const start = (address: string, lines: string[]) => {
    const child = spawn(
      'ssh',
      ['-i', hosts.clientKeyPath, '-o', `UserKnownHostsFile=${hosts.knownHostsFile}`, '-o', 'StrictHostKeyChecking=yes', '-o', 'BatchMode=yes', `root@${address}`, script(lines)],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    const started = new Promise<number>((resolve) => child.stdout.once('data', () => resolve(performance.now())));
    child.stdout.resume();
    const exited = new Promise<number>((resolve) => child.once('exit', () => resolve(performance.now())));
    return { started, exited };
  };
  const workers = [start(a.address, commands.prefill), start(b.address, commands.decode)];
  await Promise.all(workers.map((w) => w.started));
  const router = start(cpu.address, commands.router);
  const allRunning = (await router.started) - t0;
  const end = Math.max(...(await Promise.all([...workers, router].map((p) => p.exited)))) - t0;
  return { allRunning, end };
}

interface FloorNode {
  names: NodeLinkNames;
  ip: string;
}

/** Three namespaces as the local fleet makes them (same helper), outside any run. */
async function floorNamespaces(tag: string, create = true): Promise<FloorNode[]> {
  const nodes = [0, 1, 2].map((n) => ({ names: nodeLinkNames(`bench-floor-${process.pid}-${tag}-${n}`), ip: `10.213.201.${n + 2 + (tag === 'persistent' ? 0 : 10)}` }));
  if (create) await Promise.all(nodes.map((n) => ensureNodeNetwork(n.names, n.ip)));
  return nodes;
}

/**
 * The floor: the PD commands started directly, workers first (prefill and decode, then the router
 * once both are spawned), each with `ip netns exec` in netns mode. With `createNets`, creating the
 * three namespaces is inside the measured time (what provisioning does on the local fleet).
 */
async function measureFloor(nodes: FloorNode[] | null, createNets = false): Promise<FloorSample> {
  const ips = nodes ? nodes.map((n) => n.ip) : ['127.0.0.1', '127.0.0.1', '127.0.0.1'];
  const commands = pdCommands(WORK);
  const script = (lines: string[]) =>
    lines.join('\n').replaceAll(PREFILL_IP, ips[1] ?? '').replaceAll(DECODE_IP, ips[2] ?? '');
  const t0 = performance.now();
  if (createNets && nodes) await Promise.all(nodes.map((n) => ensureNodeNetwork(n.names, n.ip)));
  const start = (node: number, lines: string[]) => {
    const ns = nodes?.[node]?.names.netns;
    const [cmd, args] = ns ? ['ip', ['netns', 'exec', ns, 'bash', '-c', script(lines)]] : ['bash', ['-c', script(lines)]];
    const child = spawn(cmd, args, { stdio: 'ignore' });
    const spawned = new Promise<number>((resolve) => child.once('spawn', () => resolve(performance.now())));
    const exited = new Promise<number>((resolve) => child.once('exit', () => resolve(performance.now())));
    return { spawned, exited };
  };
  const workers = [start(1, commands.prefill), start(2, commands.decode)];
  await Promise.all(workers.map((w) => w.spawned));
  const router = start(0, commands.router);
  const allRunning = (await router.spawned) - t0;
  const end = Math.max(...(await Promise.all([...workers, router].map((p) => p.exited)))) - t0;
  if (createNets && nodes) await Promise.all(nodes.map((n) => removeNodeNetwork(n.names)));
  return { allRunning, end };
}

/** The latest of these times that happened (NaN when none did). */
function latestOf(...times: number[]): number {
  const happened = times.filter((t) => !Number.isNaN(t));
  return happened.length > 0 ? Math.max(...happened) : Number.NaN;
}

async function measureTroupe(env: BenchTemporal, taskQueue: string, target: FleetTarget, variant: Variant, runName: string): Promise<TroupeSample> {
  const backend = target.backend;
  const pd = pdPlan(runName, WORK, variant.startupOrder);
  const plan = target.adaptPlan ? target.adaptPlan(pd) : pd;
  const runId = runWorkflowId(runName);
  const serverCpu = env.serverCpuSeconds();
  const benchCpu = process.cpuUsage();
  const t0 = Date.now();
  const handle = await env.client.workflow.start('RunWorkflow', {
    taskQueue,
    workflowId: runId,
    args: [{ plan, backend, options: { stop_grace_s: 1, ...variant.options } }],
  });
  const state = (await handle.result()) as RunState;
  const resultSeen = Date.now() - t0;
  const benchUsed = process.cpuUsage(benchCpu);
  const cpu = { serverS: env.serverCpuSeconds() - serverCpu, benchS: (benchUsed.user + benchUsed.system) / 1e6 };
  if (state.status !== 'DONE') throw new Error(`run ${runName} ended ${state.status}: ${state.message}`);
  const parent = await workflowCost(env.client, runId);
  const children = await Promise.all(plan.groups.map((g) => workflowCost(env.client, nodeGroupWorkflowId(runId, g.name, 0))));
  const lastOf = (costs: WorkflowCost[], kind: string, ...names: string[]) => lastEventOf(costs, kind, ...names) - t0;
  const latest = (field: 'provisioned_at' | 'running_at') => Math.max(...state.jobs.map((j) => Date.parse(j[field] ?? ''))) - t0;
  const all = [parent, ...children];
  return {
    workflowStarted: firstEvent(parent, 'workflowExecutionStarted') - t0,
    childrenStarted: lastEvent(parent, 'childWorkflowExecutionStarted') - t0,
    // Local-fleet groups provision with a local activity (recorded as a marker), others with an activity.
    provisionDone: latestOf(lastOf(children, 'activityTaskCompleted', 'provisionJobs'), lastOf(children, 'markerRecorded', 'provisionJobs')),
    lastProvisioned: latest('provisioned_at'),
    addressesDelivered: lastOf(children, 'workflowExecutionSignaled', 'addressesReady'),
    runnersReady: lastOf(children, 'activityTaskCompleted', 'waitRunnersReady'),
    // The first jobs' permission rides on `addressesReady`; the router's (workers-first) is a `mayStart`.
    lastMayStart: lastOf(children, 'workflowExecutionSignaled', 'mayStart', 'addressesReady'),
    lastBatchScheduled: lastOf(children, 'activityTaskScheduled', 'runJobs'),
    allRunning: latest('running_at'),
    lastExitedReported: lastEvent(parent, 'workflowExecutionSignaled', 'jobEvents') - t0,
    finished: Date.parse(state.finished_at ?? '') - t0,
    resultSeen,
    cpu,
    events: {
      parent: parent.events,
      children: children.reduce((a, c) => a + c.events, 0),
      workflowTasks: all.reduce((a, c) => a + c.workflowTasks, 0),
      activities: all.reduce((a, c) => a + c.activities, 0),
      signals: all.reduce((a, c) => a + c.signalsIn, 0),
    },
  };
}

function report(result: TargetResult): void {
  const tag = `[${result.label}]`;
  const line = (label: string, xs: number[]) =>
    `${label.padEnd(40)} median ${fmt(median(xs)).padStart(6)} ms   p90 ${fmt(percentile(xs, 90)).padStart(6)} ms`;
  console.log(`\n${tag} load average ${fmt(result.loadAverage.before, 1)} before, ${fmt(result.loadAverage.after, 1)} after (2 cores; other work was running beside the bench)`);
  for (const floor of result.floors) {
    console.log(`${tag} ${floor.label}, n=${floor.samples.length}`);
    console.log(`${tag}   ${line('submit → all running', floor.samples.map((f) => f.allRunning))}`);
    console.log(`${tag}   ${line('submit → end', floor.samples.map((f) => f.end))}`);
  }
  const floor = result.floors[0]?.samples ?? [];
  const floorRunning = median(floor.map((f) => f.allRunning));
  const floorEnd = median(floor.map((f) => f.end));
  for (const { label, samples } of result.variants) {
    const m = (f: (s: TroupeSample) => number) => median(samples.map(f));
    const running = samples.map((s) => s.allRunning);
    const end = samples.map((s) => s.resultSeen);
    console.log(`\n${tag} ${label}, n=${samples.length}`);
    console.log(`${tag}   ${line('submit → all running', running)}   ${targetText(result)}`);
    console.log(`${tag}   ${line('submit → end (client sees the result)', end)}`);
    console.log(`${tag}   ratio to the floor (${result.floors[0]?.label}): all running ×${fmt(median(running) / floorRunning, 1)}, end ×${fmt(median(end) / floorEnd, 2)}`);
    console.log(`${tag}   Troupe's overhead (medians): all running +${fmt(median(running) - floorRunning)} ms, end +${fmt(median(end) - floorEnd)} ms`);
    console.log(`${tag}   CPU per run (median): Temporal server ${fmt(m((s) => s.cpu.serverS * 1000))} ms, client + worker ${fmt(m((s) => s.cpu.benchS * 1000))} ms`);
    console.log(`${tag}   phases (median ms from submit, +step):`);
    const phases: Array<[string, (s: TroupeSample) => number]> = [
      ['workflow started (client → server)', (s) => s.workflowStarted],
      ['group children started', (s) => s.childrenStarted],
      ['provisionJobs done (last group)', (s) => s.provisionDone],
      ['PROVISION: last job provisioned (run saw it)', (s) => s.lastProvisioned],
      ['ADDRESS EXCHANGE: book at the last child', (s) => s.addressesDelivered],
      ['waitRunnersReady done (last group)', (s) => s.runnersReady],
      ['last start permission at a child (mayStart)', (s) => s.lastMayStart],
      ['runJobs scheduled (last batch)', (s) => s.lastBatchScheduled],
      ['START-UP: all jobs RUNNING (run saw it)', (s) => s.allRunning],
      ['last job event (exit) at the run', (s) => s.lastExitedReported],
      ['run finished (after teardown)', (s) => s.finished],
      ['client saw the result', (s) => s.resultSeen],
    ];
    let previous = 0;
    for (const [name, f] of phases) {
      const at = m(f);
      console.log(`${tag}     ${name.padEnd(46)} ${fmt(at).padStart(6)}  (${at - previous >= 0 ? '+' : ''}${fmt(at - previous)})`);
      previous = at;
    }
    const first = samples[0]?.events;
    if (first) {
      console.log(`${tag}   per run: ${first.workflowTasks} workflow tasks, ${first.activities} activities, ${first.signals} signals, history events: run ${first.parent}, its 3 groups ${first.children}`);
    }
  }
}

async function plot(results: TargetResult[]): Promise<void> {
  const panels = results.flatMap((result) => {
    const legend = ['provision', 'address exchange', 'start-up', 'run + teardown -> result'];
    const rows = result.floors.map(({ label, samples }) => {
      const running = median(samples.map((f) => f.allRunning));
      return { label, segments: [0, 0, running, median(samples.map((f) => f.end)) - running] };
    });
    for (const { label, samples } of result.variants) {
      const m = (f: (s: TroupeSample) => number) => median(samples.map(f));
      rows.push({
        label: label.replace('Troupe, ', 'Troupe '),
        segments: [
          m((s) => s.lastProvisioned),
          m((s) => s.addressesDelivered) - m((s) => s.lastProvisioned),
          m((s) => s.allRunning) - m((s) => s.addressesDelivered),
          m((s) => s.resultSeen) - m((s) => s.allRunning),
        ],
      });
    }
    const bars = stackedBarChart({
      title: `Launch latency, PD sample, ${result.label}`,
      subtitle: `median of ${RUNS} runs; job command "${WORK}"; load average ${fmt(result.loadAverage.before, 1)} on 2 cores`,
      unit: 'ms from submit',
      legend,
      rows,
      references: [{ label: targetText(result), value: targetMs(result) }],
    });
    const spread = lineChart({
      title: `All RUNNING, every run sorted: ${result.label}`,
      xLabel: 'run (sorted by latency)',
      yLabel: 'ms',
      series: [
        ...result.floors.map(({ label, samples }) => ({ name: label, points: sorted(samples.map((f) => f.allRunning)) })),
        ...result.variants.map(({ label, samples }) => ({ name: label.replace('Troupe, ', 'Troupe '), points: sorted(samples.map((s) => s.allRunning)) })),
      ],
      references: [{ label: targetText(result), value: targetMs(result) }],
    });
    return [bars, spread];
  });
  await writePng(join(resultsDir(), 'launch-latency.png'), stackVertically(panels));
  console.log(`\nwrote ${join(resultsDir(), 'launch-latency.png')} and launch-latency.json`);
}

function sorted(values: number[]): Array<[number, number]> {
  return [...values].sort((a, b) => a - b).map((v, i) => [i + 1, v]);
}

await main();
// Done once the figures are written: an SSH connection to a test host destroyed before it answered
// our close (BENCHMARKS, section 6) must not keep the bench, and the shared SSH hosts' lock, alive.
process.exit(0);
