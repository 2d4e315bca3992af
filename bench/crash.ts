/**
 * Crash test: the seed's 3-group PD sample (router, prefill, decode; one node each, workers-first)
 * on the LOCAL fleet, with the Troupe worker in its own process, killed with SIGKILL at random
 * moments of the runs — provisioning, address exchange, start-up, running, teardown — and started
 * again each time. Each job records its start in a shared file, then sleeps.
 *
 *   npx tsx bench/crash.ts            (CRASH_KILLS=30 kills by default; CRASH_SEED=<n> to replay the choices)
 *
 * Figures per run and in total: run completed correctly (DONE, every job exit 0, started once),
 * duplicate job starts, processes / namespaces / leases left behind, time. Prints a table and
 * writes it into RELIABILITY-FIGURES.md (between the crash-test markers). Asserts nothing.
 * As root the nodes get network namespaces; otherwise loopback addresses (then no namespace to leak).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, createWriteStream, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { troupeDataConverter } from '../src/codec/data-converter';
import { defaultDevServerOptions, startDevServer, stopDevServer, type DevServerOptions } from '../src/devserver/dev-server';
import { runWorkflowId } from '../src/contract/ids';
import { runStateQuery, stopRunSignal } from '../src/contract/messages';
import type { RunState } from '../src/contract/run-state';
import { leftovers, type Leftovers } from '../test/helpers/leftovers';
import { makePlan } from '../test/helpers/plans';
import { freePort } from '../test/helpers/free-port';
import { jobVisibleTempDir } from '../test/helpers/local-fleet';

const KILLS = Number(process.env.CRASH_KILLS ?? 30);
const KILLS_PER_RUN = 3;
const SEED = Number(process.env.CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
/** How long each job sleeps after recording its start. */
const JOB_SLEEP_S = 3;
/** Slower provisioning (per call) so that a kill can land inside it. */
const PROVISION_DELAY_MS = 1000;
const RUN_LIMIT_MS = 5 * 60_000;

const PHASES = ['provisioning', 'address exchange', 'start-up', 'running', 'teardown'] as const;
type Phase = (typeof PHASES)[number];
/** The random delay after a phase is first seen, bounded by how long the phase lasts. */
const MAX_DELAY_MS: Record<Phase, number> = {
  provisioning: 1500,
  'address exchange': 100,
  'start-up': 200,
  running: 2000,
  teardown: 100,
};

const root = fileURLToPath(new URL('..', import.meta.url));
const workDir = mkdtempSync(join(tmpdir(), 'troupe-crash-'));
const fleetDir = join(workDir, 'fleet');
// Not under /tmp: an isolated node has a /tmp of its own.
const sharedDir = jobVisibleTempDir('troupe-crash-shared-');
// The jobs write here, as their runs' own users (the local fleet as root).
chmodSync(workDir, 0o755);
chmodSync(sharedDir, 0o1777);
const workerLog = createWriteStream(join(workDir, 'workers.log'));
const taskQueue = `crash-${process.pid}`;

/** mulberry32: the kill plan and delays come from CRASH_SEED. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const random = prng(SEED);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Debugging aid: the phases each run goes through, as the polls see them. */
const DEBUG = process.env.CRASH_DEBUG === '1';

/** `promise`, or `fallback` after `ms`; the timer never outlives the race. */
async function within<T, F>(promise: Promise<T>, ms: number, fallback: F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise, new Promise<F>((resolve) => (timer = setTimeout(() => resolve(fallback), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}


// ---------------------------------------------------------------- the worker process

let temporalAddress = '';
let worker: ChildProcess | null = null;
let workerStarts = 0;

async function startWorker(): Promise<void> {
  const script = join(root, 'test/helpers/worker-process.ts');
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    cwd: root,
    env: {
      ...process.env,
      TEMPORAL_ADDRESS: temporalAddress,
      TROUPE_TASK_QUEUE: taskQueue,
      TROUPE_LOCAL_STATE_DIR: fleetDir,
      TEST_PROVISION_DELAY_MS: String(PROVISION_DELAY_MS),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stderr?.pipe(workerLog, { end: false });
  workerStarts += 1;
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('worker ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`worker exited during start-up (${code}); see ${join(workDir, 'workers.log')}`)));
  });
  worker = child;
}

async function killWorker(): Promise<void> {
  const child = worker;
  if (!child) return;
  worker = null;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}

async function stopWorker(): Promise<void> {
  const child = worker;
  if (!child) return;
  worker = null;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  if ((await within(exited, 15_000, 'timeout')) === 'timeout') child.kill('SIGKILL');
}

// ---------------------------------------------------------------- phases and checks

function phaseOf(state: RunState): Phase {
  const ending = ['TERMINATING', 'TERMINATED', 'FAILED', 'DONE'].includes(state.status);
  if (ending || state.jobs.some((j) => j.exit_code !== null || j.finished_at !== null)) return 'teardown';
  if (state.jobs.some((j) => j.instance === null)) return 'provisioning';
  if (state.jobs.every((j) => j.pid === null)) return 'address exchange';
  if (!state.jobs.every((j) => j.status === 'RUNNING')) return 'start-up';
  return 'running';
}

/** Start lines per rank in the run's shared file. */
function startsPerRank(name: string, ranks: number): number[] {
  const file = join(sharedDir, name);
  const counts = Array<number>(ranks).fill(0);
  if (!existsSync(file)) return counts;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const rank = Number(line.split(' ')[0]);
    if (line !== '' && Number.isInteger(rank) && rank >= 0 && rank < ranks) counts[rank] = (counts[rank] ?? 0) + 1;
  }
  return counts;
}

// ---------------------------------------------------------------- one run

interface Kill {
  target: Phase;
  hit: Phase;
  /** The run's status when it was hit. */
  status: string;
  delayMs: number;
  restartMs: number;
}

interface RunResult {
  name: string;
  kills: Kill[];
  status: string;
  correct: boolean;
  duplicates: number;
  missing: number;
  left: Leftovers;
  seconds: number;
  note: string;
}

async function queryState(handle: WorkflowHandle): Promise<RunState | null> {
  try {
    return await handle.query(runStateQuery);
  } catch {
    return null;
  }
}

async function oneRun(client: Client, index: number, targets: Phase[]): Promise<RunResult> {
  const name = `crash-${index}-${process.pid}`;
  const record = `echo "$DSTACK_NODE_RANK $(date +%s%N)" >> ${join(sharedDir, name)}`;
  const plan = makePlan(
    name,
    [
      { name: 'router', nodes: 1, commands: [record, `sleep ${JOB_SLEEP_S}`] },
      { name: 'prefill', nodes: 1, commands: [record, `sleep ${JOB_SLEEP_S}`] },
      { name: 'decode', nodes: 1, commands: [record, `sleep ${JOB_SLEEP_S}`] },
    ],
    { startup_order: 'workers-first' },
  );
  const started = Date.now();
  const handle = await client.workflow.start('RunWorkflow', {
    taskQueue,
    workflowId: runWorkflowId(name),
    args: [{ plan, backend: 'local', options: { stop_grace_s: 1, retry_backoff_s: 1 } }],
  });
  const kills: Kill[] = [];
  for (const target of targets) {
    // Wait (with a live worker) until the run reaches the target phase or goes past it.
    let seen: RunState | null = null;
    for (;;) {
      const current = await queryState(handle);
      if (DEBUG && current && (!seen || phaseOf(seen) !== phaseOf(current))) {
        console.log(`  ${((Date.now() - started) / 1000).toFixed(2)}s ${phaseOf(current)} (${current.status})`);
      }
      if (current) seen = current;
      if (current && PHASES.indexOf(phaseOf(current)) >= PHASES.indexOf(target)) break;
      if (Date.now() - started > RUN_LIMIT_MS) break;
      await sleep(20);
    }
    if (!seen || ['DONE', 'FAILED', 'TERMINATED'].includes(seen.status)) break;
    if (target === 'teardown') {
      // Jobs ending come first; aim at the teardown activities themselves when they show in time.
      const until = Date.now() + 2_000;
      while (seen.status !== 'TERMINATING' && Date.now() < until) {
        const current = await queryState(handle);
        if (!current || ['DONE', 'FAILED', 'TERMINATED'].includes(current.status)) break;
        seen = current;
      }
    }
    const delayMs = Math.floor(random() * MAX_DELAY_MS[target]);
    await sleep(delayMs);
    const now = await queryState(handle);
    if (!now || ['DONE', 'FAILED', 'TERMINATED'].includes(now.status)) break;
    await killWorker();
    const restartAt = Date.now();
    await startWorker();
    kills.push({ target, hit: phaseOf(now), status: now.status, delayMs, restartMs: Date.now() - restartAt });
  }

  let state: RunState | null = null;
  let note = '';
  try {
    state = (await within(handle.result(), RUN_LIMIT_MS, null)) as RunState | null;
    if (!state) note = `no end within ${RUN_LIMIT_MS / 1000}s`;
  } catch (err) {
    note = `workflow failed: ${err instanceof Error ? err.message : String(err)}`;
  }
  if (!state) {
    // Stop it so teardown still runs; what is left after that is counted.
    await handle.signal(stopRunSignal, { abort: true }).catch(() => undefined);
    state = (await within(handle.result().catch(() => null), 60_000, null)) as RunState | null;
    state ??= await queryState(handle);
  }
  const seconds = (Date.now() - started) / 1000;
  const starts = startsPerRank(name, plan.jobs.length);
  const duplicates = starts.reduce((sum, n) => sum + Math.max(0, n - 1), 0);
  const missing = starts.filter((n) => n === 0).length;
  const left = leftovers(state, fleetDir);
  const clean = left.processes + left.namespaces + left.leases + left.instances === 0;
  const correct =
    state?.status === 'DONE' &&
    state.termination_reason === 'ALL_JOBS_DONE' &&
    state.jobs.every((j) => j.exit_code === 0) &&
    starts.every((n) => n === 1) &&
    clean;
  if (state && state.status !== 'DONE') note ||= `${state.status}: ${state.message ?? ''}`;
  return { name, kills, status: state?.status ?? 'unknown', correct, duplicates, missing, left, seconds, note };
}

// ---------------------------------------------------------------- report

function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join(' | ')} |`;
  return [line(headers), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

function report(results: RunResult[], totalS: number, mode: string): string {
  const kills = results.flatMap((r) => r.kills);
  const rows = results.map((r, i) => [
    String(i + 1),
    r.kills.map((k) => k.hit).join(', ') || '-',
    r.status,
    r.correct ? 'yes' : 'NO',
    String(r.duplicates),
    String(r.missing),
    String(r.left.processes),
    String(r.left.namespaces),
    String(r.left.leases + r.left.instances),
    r.seconds.toFixed(1),
    r.note.replace(/\|/g, '/').slice(0, 80),
  ]);
  const perPhase = PHASES.map((p) => `${p} ${kills.filter((k) => k.hit === p).length}`).join(', ');
  const inTerminating = kills.filter((k) => k.status === 'TERMINATING').length;
  const restart = kills.map((k) => k.restartMs).sort((a, b) => a - b);
  const median = restart[Math.floor(restart.length / 2)] ?? 0;
  const sum = (f: (r: RunResult) => number) => results.reduce((s, r) => s + f(r), 0);
  return [
    `Command: \`npx tsx bench/crash.ts\` (CRASH_SEED=${SEED}; ${mode}; worker killed with SIGKILL, restarted each time)`,
    '',
    table(['run', 'kills (phase hit)', 'status', 'correct', 'dup. starts', 'missing', 'procs left', 'netns left', 'leases left', 's', 'note'], rows),
    '',
    `- Kills: ${kills.length} (${perPhase}; ${inTerminating} of them while the run was TERMINATING); worker restart median ${(median / 1000).toFixed(1)} s.`,
    '- Phases as the run state shows them: provisioning (a job has no instance yet), address exchange (all have one, no process yet), ' +
      'start-up (some jobs running), running (all running), teardown (a job has exited, or the run is TERMINATING).',
    `- Runs completed correctly: ${results.filter((r) => r.correct).length} of ${results.length}.`,
    `- Duplicate job starts: ${sum((r) => r.duplicates)}; jobs never started: ${sum((r) => r.missing)}.`,
    `- Left behind after the runs: ${sum((r) => r.left.processes)} processes, ${sum((r) => r.left.namespaces)} namespaces, ` +
      `${sum((r) => r.left.leases)} address leases, ${sum((r) => r.left.instances)} instance records.`,
    `- Total time: ${totalS.toFixed(0)} s for ${results.length} runs (${workerStarts} worker starts).`,
  ].join('\n');
}

function writeFigures(section: string): void {
  const file = join(root, 'RELIABILITY-FIGURES.md');
  const begin = '<!-- crash-test:begin -->';
  const end = '<!-- crash-test:end -->';
  const block = `${begin}\n${section}\n${end}`;
  const current = existsSync(file) ? readFileSync(file, 'utf8') : '# Reliability figures\n';
  const next =
    current.includes(begin) && current.includes(end)
      ? current.slice(0, current.indexOf(begin)) + block + current.slice(current.indexOf(end) + end.length)
      : `${current.trimEnd()}\n\n## Crash test (worker killed with SIGKILL mid-run)\n\n${block}\n`;
  writeFileSync(file, next);
}

// ---------------------------------------------------------------- main

async function main(): Promise<void> {
  const began = Date.now();
  let devServer: DevServerOptions | null = null;
  if (process.env.TEMPORAL_ADDRESS) {
    temporalAddress = process.env.TEMPORAL_ADDRESS;
  } else {
    devServer = defaultDevServerOptions({ stateDir: join(workDir, 'temporal'), port: await freePort(), uiPort: await freePort(), dbFile: null });
    temporalAddress = (await startDevServer(devServer)).address;
  }
  const connection = await Connection.connect({ address: temporalAddress });
  const client = new Client({ connection, dataConverter: troupeDataConverter() });
  const mode = process.getuid?.() === 0 ? 'local fleet with network namespaces' : 'local fleet on loopback addresses';
  console.log(`crash test: ${KILLS} kills, seed ${SEED}, ${mode}, files in ${workDir} and ${sharedDir}`);

  const results: RunResult[] = [];
  try {
    await startWorker();
    let killsLeft = KILLS;
    // Phases cycle over the kills so each gets its share; their order within a run follows the run.
    let next = 0;
    const forced = process.env.CRASH_PHASES?.split(',') as Phase[] | undefined;
    for (let index = 1; killsLeft > 0 && index <= Math.ceil(KILLS / KILLS_PER_RUN) * 2; index++) {
      const count = Math.min(KILLS_PER_RUN, killsLeft);
      const cycle: readonly Phase[] = forced ?? PHASES;
      const targets = Array.from({ length: count }, () => cycle[next++ % cycle.length] as Phase).sort(
        (a, b) => PHASES.indexOf(a) - PHASES.indexOf(b),
      );
      const result = await oneRun(client, index, targets);
      results.push(result);
      killsLeft -= result.kills.length;
      const left = result.left;
      console.log(
        `run ${index}: ${result.status}${result.correct ? '' : ' (NOT correct)'}, kills at ${result.kills.map((k) => k.hit).join(', ') || '-'}, ` +
          `${result.duplicates} duplicate starts, left: ${left.processes} procs ${left.namespaces} netns ${left.leases + left.instances} leases, ${result.seconds.toFixed(1)} s ${result.note}`,
      );
    }
  } finally {
    await stopWorker();
    await connection.close();
    if (devServer) await stopDevServer(devServer);
  }
  const section = report(results, (Date.now() - began) / 1000, mode);
  console.log(`\n${section}`);
  writeFigures(section);
  console.log(`\nwritten to RELIABILITY-FIGURES.md; worker logs in ${join(workDir, 'workers.log')}`);
  workerLog.end();
  if (results.every((r) => r.correct)) rmSync(fleetDir, { recursive: true, force: true });
}

main().catch(async (err: unknown) => {
  console.error(err);
  await killWorker();
  process.exitCode = 1;
});
