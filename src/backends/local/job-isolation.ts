import { existsSync } from 'node:fs';
import { readFile, realpath, stat } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { JobLayout as L } from '../../runner/job-layout';
import { mountSyscallOf } from '../../runner/isolated-mounts';
import { CONFINE_PERL } from '../no-new-privs';
import { isAlive, type ProcessIdentity } from './proc';
import type { RunUser } from './run-user';
import { spawner } from './spawner';
import { isErrno } from './state-files';

/**
 * Isolation of local jobs (as root): each job runs as its run's own user (run-user.ts), in its own
 * mount, pid, UTS and IPC namespaces (src/runner/isolated-launch.ts: what the node sees), with its files readable by that user
 * and by no other run's. When it is on: isolation-mode.ts.
 */

export interface IsolationTools {
  unshare: string;
  setpriv: string;
  nsenter: string;
  mount: string;
  mkdir: string;
  sleep: string;
  /** The node's mounts by one perl process (src/runner/isolated-mounts.ts), where this machine has perl and a known mount(2). */
  perlMounts: { perl: string; mountSyscall: number } | null;
}

const SYSTEM_DIRS = ['/usr/bin', '/bin', '/usr/sbin', '/sbin'];

/** Absolute paths of the programs isolation runs as root (never taken from a PATH a task could set). */
export function isolationTools(): IsolationTools {
  const find = (name: string): string => {
    const found = SYSTEM_DIRS.map((d) => join(d, name)).find((p) => existsSync(p));
    if (!found) {
      throw new Error(`local fleet: isolating jobs needs ${name} (util-linux) in ${SYSTEM_DIRS.join(', ')}; install it or set TROUPE_LOCAL_ISOLATION=0`);
    }
    return found;
  };
  const mountSyscall = mountSyscallOf(process.arch);
  const perlMounts = mountSyscall !== null && existsSync(CONFINE_PERL) ? { perl: CONFINE_PERL, mountSyscall } : null;
  return { unshare: find('unshare'), setpriv: find('setpriv'), nsenter: find('nsenter'), mount: find('mount'), mkdir: find('mkdir'), sleep: find('sleep'), perlMounts };
}

let usable: Promise<void> | null = null;

/**
 * Checks once per process that this machine lets root make the namespaces (a container without
 * CAP_SYS_ADMIN does not): a clear error at provisioning rather than every job failing at start.
 */
export function checkIsolationUsable(tools: IsolationTools): Promise<void> {
  usable ??= spawner.run(tools.unshare, ['--mount', '--pid', '--uts', '--ipc', '--fork', 'true']).then((r) => {
    if (r.code !== 0) {
      usable = null;
      throw new Error(`local fleet: cannot isolate jobs here (unshare: ${r.stderr.trim() || `exit ${r.code}`}); give the worker CAP_SYS_ADMIN or set TROUPE_LOCAL_ISOLATION=0`);
    }
  });
  return usable;
}

function isInside(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith(sep) ? dir : `${dir}${sep}`);
}

/** The outermost strict ancestor of `path` that others may not traverse (mode without o+x), if any. */
async function outermostClosedAncestor(path: string): Promise<string | null> {
  const parts = path.split(sep).filter(Boolean);
  for (let i = 1; i < parts.length; i += 1) {
    const ancestor = `${sep}${parts.slice(0, i).join(sep)}`;
    try {
      if (((await stat(ancestor)).mode & 0o001) === 0) return ancestor;
    } catch (err) {
      if (!isErrno(err, 'ENOENT')) throw err;
      return null;
    }
  }
  return null;
}

async function realOrResolved(path: string): Promise<string> {
  try {
    return await realpath(path);
  } catch {
    return resolve(path);
  }
}

/**
 * What an isolated job must not see, outermost first, none inside another: the fleet's state
 * directory (every run's files, leases, instance records), the directories of the secret and codec keys, and the
 * outermost ancestor of the job's directory that the run's user could not traverse anyway (its
 * directory is bound back at its path, so the job reaches it through the hidden ones).
 */
export async function hiddenDirectories(jobDir: string, stateDir: string, keyFiles: ReadonlyArray<string | null>): Promise<string[]> {
  const candidates = [await realOrResolved(stateDir)];
  for (const keyFile of keyFiles) {
    if (keyFile && existsSync(keyFile)) candidates.push(dirname(await realOrResolved(keyFile)));
  }
  const closed = await outermostClosedAncestor(resolve(jobDir));
  if (closed) candidates.push(closed);
  const job = resolve(jobDir);
  const usable = candidates.filter((c) => c !== sep && !isInside(c, job));
  const outermost = usable.filter((c, i) => !usable.some((other, j) => j !== i && isInside(c, other) && (c !== other || j < i)));
  return outermost.sort((a, b) => a.length - b.length || a.localeCompare(b));
}

/** The init of an isolated job's namespaces (`started/ns_init`), or null if it is not (or no longer) running. */
export async function readNamespaceInit(jobDir: string, waitMs: number): Promise<ProcessIdentity | null> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      const [pid, starttime] = (await readFile(join(jobDir, L.started, L.nsInit), 'utf8')).trim().split(' ').map(Number);
      if (pid !== undefined && starttime !== undefined && pid > 0 && Number.isInteger(starttime)) {
        const init = { pid, starttime };
        return (await isAlive(init)) ? init : null;
      }
    } catch (err) {
      if (!isErrno(err, 'ENOENT')) throw err;
    }
    // Written a few ms after the job's start: a probe right after the start waits for it.
    if (Date.now() > deadline) return null;
    await sleep(10);
  }
}

/** The argv that runs a command as the run's user inside a running isolated job's namespaces (probes). */
export function enterJobCommand(tools: IsolationTools, init: ProcessIdentity, jobDir: string, user: RunUser): string[] {
  return [
    tools.nsenter,
    `--target=${init.pid}`,
    '--mount',
    '--pid',
    '--uts',
    '--ipc',
    '--net',
    `--wdns=${jobDir}`,
    '--',
    tools.setpriv,
    `--reuid=${user.uid}`,
    `--regid=${user.gid}`,
    '--clear-groups',
    '--inh-caps=-all',
    '--bounding-set=-all',
    '--no-new-privs',
    '--',
  ];
}

/** HOME, USER, LOGNAME and TMPDIR (its private /tmp) of a job that runs as its run's user. */
export function userEnv(jobDir: string, user: RunUser): Record<string, string> {
  return { HOME: join(jobDir, L.workDir), USER: user.name, LOGNAME: user.name, TMPDIR: '/tmp' };
}
