import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** `troupe ARGS` as a user runs it (bin/troupe.js, no colors): its exit code, stderr and duration. A hang is killed after 45 s. */
export function troupeCli(args: string[]): Promise<{ code: number | null; stderr: string; ms: number }> {
  const started = Date.now();
  const child = spawn(process.execPath, ['bin/troupe.js', ...args], { cwd: root, env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  // A hang fails the test rather than the suite's timeout.
  const killer = setTimeout(() => child.kill('SIGKILL'), 45_000);
  return new Promise((resolve) =>
    child.once('exit', (code) => {
      clearTimeout(killer);
      resolve({ code, stderr, ms: Date.now() - started });
    }),
  );
}
