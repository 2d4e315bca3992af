import { spawn, type ChildProcess } from 'node:child_process';

export interface ReadyProcess {
  child: ChildProcess;
  /** SIGTERM, then SIGKILL if it has not exited in 15 s; resolved once it has. */
  stop(): Promise<void>;
}

/**
 * Starts a server program of the tests (Prometheus, the OpenTelemetry Collector) and resolves once
 * its output says it is ready; rejects with its output if it exits first or is not ready in 60 s.
 */
export async function startReadyProcess(label: string, command: string, args: string[], ready: RegExp): Promise<ReadyProcess> {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  await new Promise<void>((resolve, reject) => {
    const deadline = setTimeout(() => done(new Error(`${label} did not start within 60 s:\n${output}`)), 60_000);
    const check = setInterval(() => {
      if (ready.test(output)) done(null);
      else if (child.exitCode !== null) done(new Error(`${label} exited ${child.exitCode}:\n${output}`));
    }, 100);
    function done(err: Error | null): void {
      clearTimeout(deadline);
      clearInterval(check);
      if (err) reject(err);
      else resolve();
    }
  });
  return {
    child,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const closed = new Promise((resolve) => child.once('close', resolve));
      child.kill('SIGTERM');
      const force = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await closed;
      clearTimeout(force);
    },
  };
}
