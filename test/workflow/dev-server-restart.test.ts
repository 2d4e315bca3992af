import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { troupeDataConverter } from '../../src/codec/data-converter';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultDevServerOptions, runningDevServer, startDevServer, stopDevServer, type DevServerOptions } from '../../src/devserver/dev-server';
import { runWorkflowId } from '../../src/contract/ids';
import { runStateQuery } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { makeLocalFleet, makeSharedDir, processGroupMembers } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { uniqueTaskQueue } from '../helpers/temporal';
import { freePort } from '../helpers/free-port';
import { listNow, readFileNow } from '../helpers/live-dir';

/**
 * The Temporal service itself goes away mid-run: its own dev server (free ports, a SQLite file)
 * is stopped by pid while the jobs run, then started again on the same file. The run picks up
 * where it was and finishes, every job started exactly once, nothing left behind.
 */

const stateDir = mkdtempSync(join(tmpdir(), 'troupe-devserver-restart-'));
const fleet = makeLocalFleet('troupe-devserver-restart-fleet-');
const shared = makeSharedDir('troupe-devserver-restart-out-');
const taskQueue = uniqueTaskQueue('server-restart');
const workers: ChildProcess[] = [];
let opts: DevServerOptions;
let connection: Connection;
let client: Client;


beforeAll(async () => {
  opts = defaultDevServerOptions({ stateDir, port: await freePort(), uiPort: await freePort(), dbFile: join(stateDir, 'temporal.db') });
  const server = await startDevServer(opts);
  connection = await Connection.connect({ address: server.address });
  client = new Client({ connection, dataConverter: troupeDataConverter() });
});

afterAll(async () => {
  for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
  await connection?.close();
  if (opts) await stopDevServer(opts);
  fleet.remove();
  shared.remove();
  rmSync(stateDir, { recursive: true, force: true });
});

async function startWorkerProcess(): Promise<ChildProcess> {
  const script = fileURLToPath(new URL('../helpers/worker-process.ts', import.meta.url));
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    env: {
      ...process.env,
      TEMPORAL_ADDRESS: `127.0.0.1:${opts.port}`,
      TROUPE_TASK_QUEUE: taskQueue,
      TROUPE_LOCAL_STATE_DIR: fleet.stateDir,
      TEST_PROVISION_DELAY_MS: '500',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  workers.push(child);
  // The worker's own log is kept for a failure message, not printed.
  let log = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    log = (log + chunk.toString()).slice(-20_000);
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('worker ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`worker exited early (${code}):\n${log}`)));
  });
  return child;
}

async function waitForState(name: string, check: (s: RunState) => boolean, timeoutMs = 90_000): Promise<RunState> {
  const handle = client.workflow.getHandle(runWorkflowId(name));
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const state = await handle.query(runStateQuery);
    if (check(state)) return state;
    if (Date.now() > deadline) throw new Error(`state not reached: ${state.status} ${JSON.stringify(state.jobs.map((j) => j.status))}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The result, bounded: a run that never ends is a failure, not a hung test. */
async function resultWithin(name: string, ms: number): Promise<RunState> {
  const handle = client.workflow.getHandle(runWorkflowId(name));
  return await Promise.race([
    handle.result() as Promise<RunState>,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`run ${name} did not end within ${ms / 1000}s`)), ms)),
  ]);
}

async function stopServer(signal: 'SIGTERM' | 'SIGKILL'): Promise<number> {
  const pid = runningDevServer(opts);
  if (pid === null) throw new Error('the dev server is not running');
  if (signal === 'SIGTERM') {
    await stopDevServer(opts);
  } else {
    process.kill(pid, 'SIGKILL');
    while (runningDevServer(opts) !== null) await new Promise((r) => setTimeout(r, 50));
  }
  return pid;
}

function sampleRun(name: string, sleepS: number) {
  const record = `echo "$DSTACK_NODE_RANK" >> ${shared.dir}/${name}`;
  return makePlan(
    name,
    [
      { name: 'router', nodes: 1, commands: [record, `sleep ${sleepS}`] },
      { name: 'prefill', nodes: 1, commands: [record, `sleep ${sleepS}`] },
      { name: 'decode', nodes: 1, commands: [record, `sleep ${sleepS}`] },
    ],
    { startup_order: 'workers-first' },
  );
}

function expectCleanFinish(state: RunState, name: string) {
  expect(state.status, state.message ?? '').toBe('DONE');
  expect(state.termination_reason).toBe('ALL_JOBS_DONE');
  expect(shared.lines(name).map(Number).sort()).toEqual([0, 1, 2]);
  for (const job of state.jobs) {
    expect(job.exit_code).toBe(0);
    if (job.pid !== null) expect(processGroupMembers(job.pid)).toEqual([]);
    const netns = job.instance?.details?.netns;
    if (netns) expect(existsSync(`/run/netns/${netns}`), `namespace ${netns} left behind`).toBe(false);
  }
  const leases = join(fleet.stateDir, 'leases');
  // Leases are released while we look: read what is there when we look.
  const held = listNow(leases).filter((f) => (readFileNow(join(leases, f)) ?? '').includes(state.run_uid));
  expect(held, 'address leases left behind').toEqual([]);
}

describe('the Temporal dev server stopped and restarted on its SQLite file mid-run', () => {
  it.each(['SIGTERM', 'SIGKILL'] as const)(
    'stopped with %s while the jobs run: restarted on the same file, the run finishes, each job started once',
    async (signal) => {
      const worker = await startWorkerProcess();
      const name = `restart-${signal.toLowerCase()}-${taskQueue.slice(-8)}`;
      await client.workflow.start('RunWorkflow', {
        taskQueue,
        workflowId: runWorkflowId(name),
        args: [{ plan: sampleRun(name, 10), backend: 'local', options: { stop_grace_s: 1 } }],
      });
      // Every job has started and some still run (on a busy machine the workers may end before the master starts).
      await waitForState(name, (s) => s.jobs.every((j) => j.running_at !== null) && s.jobs.some((j) => j.exit_code === null));

      const oldPid = await stopServer(signal);
      // The jobs go on (and may end) while the service is away.
      await new Promise((r) => setTimeout(r, 3_000));
      const restarted = await startDevServer(opts);
      expect(restarted.pid).not.toBe(oldPid);

      const state = await resultWithin(name, 120_000);
      expectCleanFinish(state, name);
      expect(worker.exitCode, 'the worker rode out the outage').toBeNull();
      worker.kill('SIGTERM');
      await new Promise((r) => worker.once('exit', r));
    },
    240_000,
  );

  it('stopped with SIGKILL during provisioning: restarted, the run finishes, each job started once', async () => {
    const worker = await startWorkerProcess();
    const name = `restart-prov-${taskQueue.slice(-8)}`;
    await client.workflow.start('RunWorkflow', {
      taskQueue,
      workflowId: runWorkflowId(name),
      args: [{ plan: sampleRun(name, 2), backend: 'local', options: { stop_grace_s: 1 } }],
    });
    await waitForState(name, (s) => s.jobs.some((j) => j.instance === null) && s.jobs.some((j) => j.instance !== null), 60_000);
    await stopServer('SIGKILL');
    await new Promise((r) => setTimeout(r, 2_000));
    await startDevServer(opts);

    const state = await resultWithin(name, 120_000);
    expectCleanFinish(state, name);
    worker.kill('SIGTERM');
    await new Promise((r) => worker.once('exit', r));
  }, 240_000);
});
