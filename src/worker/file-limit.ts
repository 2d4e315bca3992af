import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';

/** RLIMIT_NOFILE of this process; null stands for unlimited. */
export interface FileLimit {
  soft: number | null;
  hard: number | null;
}

const limitValue = (text: string | undefined): number | null => (text === undefined || text === 'unlimited' ? null : Number(text));

/** This process's limit on open files, as /proc/self/limits reads. */
export async function fileLimit(): Promise<FileLimit> {
  const line = (await readFile('/proc/self/limits', 'utf8')).split('\n').find((l) => l.startsWith('Max open files'));
  const [soft, hard] = line?.slice('Max open files'.length).trim().split(/\s+/) ?? [];
  return { soft: limitValue(soft), hard: limitValue(hard) };
}

/**
 * Raises this process's soft limit on open files to its hard limit, as Go programs do at start: a
 * worker of a large run holds many descriptors at once (its job files, the processes it starts), and
 * the common soft limit of 1,024 is far below what the system allows. Node has no setrlimit, so
 * util-linux's `prlimit` does it on this process (Node 20 itself raises the limit at start on Linux;
 * this holds the worker to it whatever started it). Returns the limit in force afterwards.
 */
export async function raiseFileLimit(): Promise<FileLimit> {
  const limit = await fileLimit();
  if (limit.soft === limit.hard) return limit;
  const hard = limit.hard === null ? 'unlimited' : String(limit.hard);
  try {
    await promisify(execFile)('prlimit', ['--pid', String(process.pid), `--nofile=${hard}:${hard}`]);
  } catch {
    // No prlimit (or not allowed): the worker goes on with its soft limit, its fan-outs bounded anyway.
  }
  return await fileLimit();
}
