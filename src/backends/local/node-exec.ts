import { spawn } from 'node:child_process';
import type { ExecResult } from '../backend';
import { BASH } from '../../runner/job-wrapper';
import { inJobCgroup } from '../cgroup-limits';

const MAX_OUTPUT = 64 * 1024;
/** What `timeout` reports, so a probe that hangs reads like one that timed out in a shell. */
export const TIMED_OUT_EXIT_CODE = 124;

/**
 * Runs a short bash script where a job runs (inside its namespace when it has one, or through
 * `enter`: the argv that enters an isolated job's namespaces as its user), in its own process
 * group so a timeout kills everything it started; in the job's cgroup when `cgroupProcs` names it
 * and under its walls when `confine` is given (a probe is the task's code: the job's limits and
 * walls hold it too). Output is stdout and stderr together.
 */
export function execOnNode(
  script: string,
  opts: { netns: string | null; enter?: readonly string[]; cwd: string; env: Record<string, string>; timeoutMs: number; cgroupProcs?: readonly string[]; confine?: readonly string[] },
): Promise<ExecResult> {
  const bash = [...(opts.confine ?? []), BASH, '--noprofile', '--norc', '-c', script];
  const argv = opts.enter ? [...opts.enter, ...bash] : opts.netns ? ['ip', 'netns', 'exec', opts.netns, ...bash] : bash;
  const [command = BASH, ...args] = inJobCgroup(opts.cgroupProcs ?? [], argv);
  return new Promise((resolve) => {
    // stdin from /dev/null: on a socket stdin bash would source ~/.bashrc.
    const child = spawn(command, args, { cwd: opts.cwd, env: opts.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let timedOut = false;
    const collect = (chunk: Buffer) => {
      if (output.length < MAX_OUTPUT) output += chunk.toString('utf8');
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }, opts.timeoutMs);
    const firstLine = () => output.split('\n').find((line) => line.trim() !== '')?.trim() ?? '';
    child.once('error', (err) => {
      clearTimeout(timer);
      resolve({ exit_code: 127, output: err.message });
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      const exit = timedOut ? TIMED_OUT_EXIT_CODE : (code ?? 128 + (signal ? 9 : 0));
      resolve({ exit_code: exit, output: firstLine() });
    });
  });
}
