import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Client } from '@temporalio/client';
import { afterAll, beforeAll } from 'vitest';
import { runStateQuery } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { makeLocalFleet, makeSharedDir } from './local-fleet';
import { temporalAddress, testClient, uniqueTaskQueue } from './temporal';

export interface WorkerProcessOptions {
  taskQueue: string;
  localStateDir: string;
  /** Extra environment for test/helpers/worker-process.ts (TEST_PROVISION_DELAY_MS, …). */
  env?: Record<string, string>;
  /** Pipes given to the worker as fds 3, 4, … (inherited, not close-on-exec): what a worker started by another program may hold. */
  extraFds?: number;
  /** `ulimit -n` (soft and hard) of the worker process: how many files it may hold open at once. */
  fileLimit?: number;
}

/** Starts test/helpers/worker-process.ts in its own process and waits until it polls. */
export async function startWorkerProcess(opts: WorkerProcessOptions): Promise<ChildProcess> {
  const script = fileURLToPath(new URL('./worker-process.ts', import.meta.url));
  const command = [process.execPath, '--import', 'tsx', script];
  const [file, args] = opts.fileLimit === undefined
    ? [command[0] as string, command.slice(1)]
    : ['bash', ['-c', `ulimit -n ${opts.fileLimit} && exec "$@"`, 'bash', ...command]];
  const child = spawn(file, args, {
    env: {
      ...process.env,
      TEMPORAL_ADDRESS: temporalAddress(),
      TROUPE_TASK_QUEUE: opts.taskQueue,
      TROUPE_LOCAL_STATE_DIR: opts.localStateDir,
      ...opts.env,
    },
    stdio: ['ignore', 'pipe', 'inherit', ...Array<'pipe'>(opts.extraFds ?? 0).fill('pipe')],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('worker ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`worker exited early (${code})`)));
  });
  return child;
}

/** The run's state once `check` holds (polled; `timeoutMs`, 90 s by default, at most). */
export async function waitForRunState(handle: { query: (q: typeof runStateQuery) => Promise<RunState> }, check: (s: RunState) => boolean, timeoutMs = 90_000): Promise<RunState> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const state = await handle.query(runStateQuery);
    if (check(state)) return state;
    if (Date.now() > deadline) throw new Error(`state not reached: ${JSON.stringify(state.jobs.map((j) => j.status))}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** kill -9, and wait until the process is gone. */
export async function kill9(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}

/**
 * A test file's set-up for runs served by worker processes it starts and kills: a local fleet, a
 * shared directory the jobs write into, a task queue, a client; every worker still alive is
 * killed and everything removed after the file.
 */
export function useWorkerProcesses(name: string) {
  const fleet = makeLocalFleet(`troupe-${name}-`);
  const shared = makeSharedDir(`troupe-${name}-shared-`);
  const workers: ChildProcess[] = [];
  let connection: { client: Client; close: () => Promise<void> } | null = null;
  beforeAll(async () => {
    connection = await testClient();
  });
  afterAll(async () => {
    for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
    await connection?.close();
    fleet.remove();
    shared.remove();
  });
  return {
    fleet,
    shared,
    workers,
    taskQueue: uniqueTaskQueue(name),
    get client(): Client {
      if (!connection) throw new Error('the client is connected in beforeAll');
      return connection.client;
    },
  };
}
