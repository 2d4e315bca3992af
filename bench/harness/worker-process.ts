import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { WorkerConfig } from './worker-config';

const entry = fileURLToPath(new URL('./worker-main.ts', import.meta.url));

export interface WorkerProcess {
  pid: number;
  /** Peak resident set of the worker process so far (VmHWM), in MiB. */
  peakRssMiB(): number;
  stop(): Promise<void>;
  /** kill -9, as a crash: the worker gets no chance to clean up. */
  kill9(): Promise<void>;
}

export interface WorkerProcessOptions {
  /** `ulimit -n` (soft and hard) of the worker: how many files it may hold open at once. */
  fileLimit?: number;
}

/** Starts bench/harness/worker-main.ts under node + tsx and waits until it polls. */
export async function startWorkerProcess(config: WorkerConfig, opts: WorkerProcessOptions = {}): Promise<WorkerProcess> {
  // BENCH_CPU_PROF=DIR: the worker writes a V8 CPU profile there when it stops (where its time went).
  const profile = process.env.BENCH_CPU_PROF ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_CPU_PROF] : [];
  const command = [process.execPath, ...profile, '--import', 'tsx', entry];
  // bash execs the worker: the pid is the worker's.
  const [file, args] = opts.fileLimit === undefined ? [process.execPath, command.slice(1)] : ['bash', ['-c', `ulimit -n ${opts.fileLimit} && exec "$@"`, 'bash', ...command]];
  const child: ChildProcess = spawn(file, args, {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, TROUPE_BENCH_WORKER: JSON.stringify(config) },
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error('could not start a worker process');
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let lastPeakMiB = Number.NaN;
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`worker process exited with ${code} before it was ready`)));
  });
  const handle: WorkerProcess = {
    pid,
    peakRssMiB: () => {
      // Remembered: the peak of a worker that has ended is its last reading.
      try {
        const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
        if (match) lastPeakMiB = Number(match[1]) / 1024;
      } catch {
        // gone
      }
      return lastPeakMiB;
    },
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.exitCode === null && child.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    },
    kill9: async () => {
      handle.peakRssMiB();
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
  return handle;
}
