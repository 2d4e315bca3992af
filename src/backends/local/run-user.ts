import { createHash } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { spawner } from './spawner';

/**
 * The unprivileged system user that a run's jobs run as on the local fleet (as root): one per
 * submission of a run, `troupe-<10 hex>`, created at provisioning and removed at release.
 *
 * Crash-safe by construction: the name derives from the run's id and submission, so whichever
 * worker releases the run removes the user another worker created; creation and removal are
 * idempotent and tolerate each other across worker processes (useradd/userdel lock the user
 * database; a locked database is tried again).
 */

export interface RunUser {
  name: string;
  uid: number;
  gid: number;
}

/** What a system user name may hold (useradd's default NAME_REGEX for system users, and ≤ 32 characters). */
export function runUserName(runId: string, submission: number): string {
  return `troupe-${createHash('sha256').update(`${runId}\0${submission}`).digest('hex').slice(0, 10)}`;
}

/** The user's entry in /etc/passwd, read without a process. */
export async function lookupUser(name: string): Promise<RunUser | null> {
  const passwd = await readFile('/etc/passwd', 'utf8');
  for (const line of passwd.split('\n')) {
    const [user, , uid, gid] = line.split(':');
    if (user === name && uid !== undefined && gid !== undefined) return { name, uid: Number(uid), gid: Number(gid) };
  }
  return null;
}

/** useradd and userdel exit codes that mean "another process holds the user database; try again". */
const LOCKED = new Set([10, 1]);
const ATTEMPTS = 40;

const ensuring = new Map<string, Promise<RunUser>>();

/** The run's user, created if it does not exist (once per process, however many callers ask). */
export function ensureRunUser(name: string): Promise<RunUser> {
  let pending = ensuring.get(name);
  if (!pending) {
    pending = createUser(name);
    ensuring.set(name, pending);
    pending.catch(() => ensuring.delete(name));
  }
  return pending;
}

async function createUser(name: string): Promise<RunUser> {
  let last = '';
  for (let attempt = 1; attempt <= ATTEMPTS; attempt += 1) {
    const known = await lookupUser(name);
    if (known) return known;
    // No home directory of its own (a job's HOME is its work/ directory): `/`, which exists and
    // it cannot write, so a session of the job's own sshd (inter-node SSH for MPI) starts without
    // a "could not chdir to home directory" line in every mpirun log. Bash as shell and no
    // password (`*`: not a locked account, which sshd would refuse) so that sshd can log this
    // user in with the run's key.
    const r = await spawner.run('useradd', ['--system', '--user-group', '--no-create-home', '--home-dir', '/', '--shell', '/bin/bash', '--password', '*', name]);
    // 9: created meanwhile by another worker process.
    if (r.code === 0 || r.code === 9) continue;
    last = r.stderr.trim() || `exit ${r.code}`;
    if (!LOCKED.has(r.code)) break;
    await sleep(20 * attempt);
  }
  const known = await lookupUser(name);
  if (known) return known;
  throw new Error(`local fleet: could not create the run's user ${name}: useradd: ${last}`);
}

/** Live processes whose owner is `uid` (the owner of /proc/PID is the process's effective uid). */
async function processesOf(uid: number): Promise<number[]> {
  const pids = (await readdir('/proc')).filter((n) => /^\d+$/.test(n));
  const owned = await Promise.all(
    pids.map(async (pid) => {
      try {
        return (await stat(`/proc/${pid}`)).uid === uid ? Number(pid) : null;
      } catch {
        return null;
      }
    }),
  );
  return owned.filter((pid): pid is number => pid !== null);
}

/**
 * Removes the run's user: kills whatever still runs as it (the jobs were stopped before; this is
 * what escaped them), gives its files in the machine's shared scratch directories to root (a
 * later user may get the same uid), then deletes the user and its group. Idempotent.
 */
export async function removeRunUser(name: string): Promise<void> {
  ensuring.delete(name);
  const user = await lookupUser(name);
  if (!user) return;
  await killProcessesOf(user.uid);
  // By path, but safe: no process of the user is left to swap a directory of its own for a link,
  // and no other user may rename its entries in these sticky directories. (Not -execdir: find
  // refuses it whenever the worker's PATH holds an empty or relative entry, and would chown nothing.)
  await spawner.run('find', ['/tmp', '/var/tmp', '/dev/shm', '-xdev', '-uid', String(user.uid), '-exec', 'chown', '-h', '0:0', '{}', '+']);
  let last = '';
  for (let attempt = 1; attempt <= ATTEMPTS; attempt += 1) {
    const r = await spawner.run('userdel', [name]);
    // 6: removed meanwhile by another worker process.
    if (r.code === 0 || r.code === 6 || !(await lookupUser(name))) return;
    last = r.stderr.trim() || `exit ${r.code}`;
    // 8: in use by a process that started while we looked.
    if (r.code === 8) await killProcessesOf(user.uid);
    else if (!LOCKED.has(r.code)) break;
    await sleep(20 * attempt);
  }
  throw new Error(`local fleet: could not remove the run's user ${name}: userdel: ${last}`);
}

async function killProcessesOf(uid: number): Promise<void> {
  for (let round = 0; round < 50; round += 1) {
    const left = await processesOf(uid);
    if (left.length === 0) return;
    for (const pid of left) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // ended meanwhile
      }
    }
    await sleep(20);
  }
}
