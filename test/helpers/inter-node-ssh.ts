import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { stringify } from 'yaml';
import { JobLayout } from '../../src/runner/job-layout';
import { filesUnderNow, readFileNow } from './live-dir';
import type { RunState } from '../../src/contract/run-state';

/** Checks shared by the inter-node SSH tests: the SSH servers of a run's nodes, and what is left after it. */

/**
 * A two-node task (groups `head` and `peer`, the peer `sleep infinity`), the head's commands
 * given, `workers-first` and `master-done` as in dstack's MPI examples.
 */
export function twoNodeTask(name: string, headCommands: string[], env: string[] = [], resources: Record<string, string> = {}): string {
  const res = Object.keys(resources).length > 0 ? { resources } : {};
  return stringify({
    type: 'task',
    name,
    ...(env.length > 0 ? { env } : {}),
    startup_order: 'workers-first',
    stop_criteria: 'master-done',
    groups: [
      { name: 'head', commands: headCommands, ...res },
      { name: 'peer', commands: ['sleep infinity'], ...res },
    ],
  });
}

/** The job directories of a local run (from its instances). */
export function jobDirsOf(state: RunState): string[] {
  return state.jobs.map((j) => j.instance?.details.job_dir ?? '').filter((d) => d !== '');
}

function cmdline(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}

/** Pids of live sshd processes started with a config inside one of `dirs`. */
export function sshServersUnder(dirs: readonly string[]): number[] {
  return readdirSync('/proc')
    .filter((n) => /^\d+$/.test(n))
    .filter((pid) => {
      const line = cmdline(pid);
      return line.includes('sshd') && dirs.some((d) => line.includes(`${d}/`));
    })
    .map(Number);
}

/** Files under `dir` (recursively) whose text holds a private key. */
export function privateKeysUnder(dir: string): string[] {
  return filesUnderNow(dir)
    .map((p) => join(dir, p))
    .filter((path) => (statSync(path, { throwIfNoEntry: false })?.size ?? 0) < 1_000_000 && (readFileNow(path) ?? '').includes('PRIVATE KEY'));
}

/**
 * After the run's teardown: no SSH server of its nodes runs, no key is left in its job
 * directories, and of each job directory only the log, the exit code and the start record stay.
 */
export async function expectNothingLeft(state: RunState): Promise<void> {
  const dirs = jobDirsOf(state);
  expect(dirs).toHaveLength(state.jobs.length);
  // Teardown has finished when the run's result is in; the kernel may take a moment to reap.
  const deadline = Date.now() + 5_000;
  while (sshServersUnder(dirs).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  expect(sshServersUnder(dirs)).toEqual([]);
  expect(dirs.flatMap(privateKeysUnder)).toEqual([]);
  for (const dir of dirs) {
    const left = existsSync(dir) ? readdirSync(dir) : [];
    expect(left.filter((n) => ![JobLayout.log, JobLayout.exitCode, JobLayout.started].includes(n as 'log'))).toEqual([]);
  }
  for (const job of state.jobs) {
    const netns = job.instance?.details.netns;
    if (netns) expect(existsSync(`/run/netns/${netns}`)).toBe(false);
  }
}
