import type { ChildProcess } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { runWorkflowId } from '../../workflows/ids';
import { withAllJobs } from '../../src/client/run-jobs';
import { runJobsQuery, runStateQuery, stopRunSignal } from '../../workflows/messages';
import type { RunState } from '../../workflows/run-state';
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
const env = useWorkerProcesses('scale-teardown');
const { fleet, taskQueue, workers } = env;
const name = `scale-${taskQueue}`;

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
  const handle = env.client.workflow.getHandle(runWorkflowId(name));
  // Not a query: a query of a closed run waits for a worker to answer it.
  const described = await handle.describe().catch(() => null);
  if (described?.status.name !== 'RUNNING') return;
  const worker = await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: { TEST_LOCAL_NETWORK: 'loopback' } });
  workers.push(worker);
  await handle.signal(stopRunSignal, { abort: true }).catch(() => undefined);
  await handle.result().catch(() => undefined);
  await kill9(worker);
}, 300_000);

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
});
