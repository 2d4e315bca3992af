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
}

/** Starts bench/harness/worker-main.ts under node + tsx and waits until it polls. */
export async function startWorkerProcess(config: WorkerConfig): Promise<WorkerProcess> {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', entry], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, TROUPE_BENCH_WORKER: JSON.stringify(config) },
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error('could not start a worker process');
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`worker process exited with ${code} before it was ready`)));
  });
  return {
    pid,
    peakRssMiB: () => {
      const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      return match ? Number(match[1]) / 1024 : Number.NaN;
    },
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.exitCode === null && child.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
