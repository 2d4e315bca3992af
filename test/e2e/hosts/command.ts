import { execFile, execFileSync } from 'node:child_process';

/** Runs a program (no shell) and returns its stdout; throws with its stderr on failure. */
export function run(program: string, args: string[], options: { allowFailure?: boolean } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(program, args, { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err && !options.allowFailure) {
        reject(new Error(`${program} ${args.join(' ')} failed: ${stderr.trim() || err.message}`));
        return;
      }
      resolve(stdout);
    });
  });
}

/** Synchronous variant for process-exit cleanup, where nothing asynchronous runs any more. */
export function runSync(program: string, args: string[]): string {
  try {
    return execFileSync(program, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return '';
  }
}
