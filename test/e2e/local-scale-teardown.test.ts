import type { ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { runUserName } from '../../src/backends/local/run-user';
import { afterAll, describe, expect, it } from 'vitest';
import { runWorkflowId } from '../../src/contract/ids';
import { withAllJobs } from '../../src/client/run-jobs';
import { runJobsQuery, runStateQuery, stopRunSignal } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { leftovers } from '../helpers/leftovers';
import { makePlan } from '../helpers/plans';
import { kill9, startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/**
 * A run larger than a /24 (the local fleet's old size), torn down by a worker that may hold only
 * 1,024 files open: before teardown's fan-outs were bounded and its stops shared one scan of /proc,
 * the worker ran out of descriptors from ~60 nodes and aborted ("Failed to initialize uv loop").
 */

const NODES = 300;
const FILE_LIMIT = 1024;
/** The run whose teardown loses its worker: its jobs ignore SIGTERM, so the teardown waits out their grace. */
const KILLED_NODES = 100;
const KILLED_GRACE_S = 4;
const env = useWorkerProcesses('scale-teardown');
const { fleet, taskQueue, workers } = env;
const name = `scale-${taskQueue}`;
const killedName = `scale-killed-${taskQueue}`;

/** Rejects if the worker process ends: a worker that aborted fails the test at once instead of leaving the run to wait. */
function unlessWorkerDies<T>(worker: ChildProcess, work: Promise<T>): Promise<T> {
  return Promise.race([
    work,
    new Promise<never>((_, reject) => {
      if (worker.exitCode !== null || worker.signalCode !== null) reject(new Error(`the worker ended (${worker.exitCode ?? worker.signalCode})`));
      worker.once('exit', (code, signal) => reject(new Error(`the worker ended (${code ?? signal})`)));
    }),
  ]);
}

function openFiles(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return 0;
  }
}

// Before the fleet is removed (hooks run in reverse): a run a failed test left going is torn down by a worker without the limit.
afterAll(async () => {
  const open = [];
  for (const run of [name, killedName]) {
    const handle = env.client.workflow.getHandle(runWorkflowId(run));
    // Not a query: a query of a closed run waits for a worker to answer it.
    const described = await handle.describe().catch(() => null);
    if (described?.status.name === 'RUNNING') open.push(handle);
  }
  if (open.length === 0) return;
  const worker = await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: { TEST_LOCAL_NETWORK: 'loopback' } });
  workers.push(worker);
  for (const handle of open) {
    await handle.signal(stopRunSignal, { abort: true }).catch(() => undefined);
    await handle.result().catch(() => undefined);
  }
  await kill9(worker);
}, 300_000);

/** True while /etc/passwd has the submission's run user. */
function hasRunUser(runUid: string): boolean {
  const user = runUserName(runUid, 0);
  return readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .some((line) => line.startsWith(`${user}:`));
}

describe('a large local run and a worker with few file descriptors', () => {
  it(`${NODES} nodes reach RUNNING and are torn down by a worker under ulimit -n ${FILE_LIMIT}; the worker lives on, nothing is left`, async () => {
    const worker = await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, fileLimit: FILE_LIMIT, env: { TEST_LOCAL_NETWORK: 'loopback' } });
    workers.push(worker);
    const pid = worker.pid as number;
    const plan = makePlan(name, [
      { name: 'head', nodes: 1, commands: ['sleep infinity'] },
      { name: 'prefill', nodes: 150, commands: ['sleep infinity'] },
      { name: 'decode', nodes: NODES - 151, commands: ['sleep infinity'] },
    ]);
    let peak = 0;
    const sampler = setInterval(() => {
      peak = Math.max(peak, openFiles(pid));
    }, 50);
    try {
      const started = Date.now();
      const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }] });
      // A large run's state comes a page of jobs at a time.
      const allJobs = async (state: RunState) => await withAllJobs(state, (offset, limit) => handle.query(runJobsQuery, { offset, limit }));
      await unlessWorkerDies(worker, waitForRunState(handle, (s) => s.status === 'RUNNING', 240_000));
      let running = await allJobs(await handle.query(runStateQuery));
      while (!(running.jobs.length === NODES && running.jobs.every((j) => j.status === 'RUNNING'))) {
        await unlessWorkerDies(worker, new Promise((r) => setTimeout(r, 250)));
        running = await allJobs(await handle.query(runStateQuery));
      }
      const runningAfter = Date.now() - started;
      expect(new Set(running.jobs.map((j) => j.instance?.internal_ip)).size).toBe(NODES);
      const stopping = Date.now();
      await handle.signal(stopRunSignal, { abort: false });
      await unlessWorkerDies(worker, handle.result());
      const state = await allJobs(await handle.query(runStateQuery));
      expect(state.jobs).toHaveLength(NODES);
      const tornDown = Date.now() - stopping;
      console.log(`${NODES} nodes: all RUNNING after ${runningAfter} ms, torn down in ${tornDown} ms, the worker's peak open files ${peak} (limit ${FILE_LIMIT})`);
      expect(state.status).toBe('TERMINATED');
      expect(state.message ?? '').not.toMatch(/teardown incomplete/);
      expect(worker.exitCode).toBeNull();
      expect(worker.signalCode).toBeNull();
      expect(leftovers(state, fleet.stateDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
    } finally {
      clearInterval(sampler);
    }
    worker.kill('SIGTERM');
    await new Promise((r) => worker.once('exit', r));
  }, 420_000);

  it(`a worker killed (kill -9) in the middle of a ${KILLED_NODES}-node teardown is replaced, and the next one finishes it: nothing is left`, async () => {
    const first = await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, fileLimit: FILE_LIMIT, env: { TEST_LOCAL_NETWORK: 'loopback' } });
    workers.push(first);
    // Commands that ignore SIGTERM (a sleep inherits the ignored signal): each stop waits out the grace, then SIGKILL.
    const stubborn = ["trap '' TERM; while :; do sleep 1; done"];
    const plan = makePlan(killedName, [
      { name: 'head', nodes: 1, commands: stubborn },
      { name: 'prefill', nodes: 50, commands: stubborn },
      { name: 'decode', nodes: KILLED_NODES - 51, commands: stubborn },
    ]);
    const handle = await env.client.workflow.start('RunWorkflow', {
      taskQueue,
      workflowId: runWorkflowId(killedName),
      args: [{ plan, backend: 'local', options: { stop_grace_s: KILLED_GRACE_S } }],
    });
    const allJobs = async (state: RunState) => await withAllJobs(state, (offset, limit) => handle.query(runJobsQuery, { offset, limit }));
    await unlessWorkerDies(first, waitForRunState(handle, (s) => s.status === 'RUNNING', 240_000));
    let running = await allJobs(await handle.query(runStateQuery));
    while (!(running.jobs.length === KILLED_NODES && running.jobs.every((j) => j.status === 'RUNNING'))) {
      await unlessWorkerDies(first, new Promise((r) => setTimeout(r, 250)));
      running = await allJobs(await handle.query(runStateQuery));
    }
    await handle.signal(stopRunSignal, { abort: false });
    await waitForRunState(handle, (s) => s.status === 'TERMINATING', 60_000);
    // Inside the stops' grace: the jobs' processes are all there yet, SIGTERM ignored.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(leftovers(running, fleet.stateDir).processes).toBeGreaterThan(0);
    await kill9(first);
    const second = await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, fileLimit: FILE_LIMIT, env: { TEST_LOCAL_NETWORK: 'loopback' } });
    workers.push(second);
    const replaced = Date.now();
    await unlessWorkerDies(second, handle.result());
    console.log(`${KILLED_NODES} nodes: teardown finished ${Date.now() - replaced} ms after the second worker started`);
    const state = await allJobs(await handle.query(runStateQuery));
    expect(state.status).toBe('TERMINATED');
    expect(state.message ?? '').not.toMatch(/teardown incomplete/);
    expect(leftovers(state, fleet.stateDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
    expect(hasRunUser(state.run_uid)).toBe(false);
    second.kill('SIGTERM');
    await new Promise((r) => second.once('exit', r));
  }, 300_000);
});
