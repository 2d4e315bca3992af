import { closeSync, existsSync, fchmodSync, fchownSync, openSync } from 'node:fs';
import { constants, lstat, open, readdir, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { spawner } from './spawner';
import { mapLimit } from '../../concurrency/map-limit';
import { retryFdShortage } from '../../concurrency/fd-shortage';
import { isErrno } from './state-files';

/**
 * Removing what a job leaves in its directory, as root, without ever acting on a path the job
 * controls (issue 29, finding 1). A job's directory is root's; its `work/` (and `tmp/`, `ssh/state/`)
 * are the run user's, and other jobs of the same run (the same user) may still run while one node's
 * directory is cleaned up: any of them holding a descriptor of it can swap a directory inside for a
 * symlink to anywhere at any moment.
 *
 * - Node's recursive `rm` walks by path (lstat, then readdir and unlink through the path): a symlink
 *   swapped in between makes root delete files elsewhere on the machine. GNU `rm -rf` walks with
 *   fts relative to directory descriptors (openat with O_NOFOLLOW, checked against the lstat it
 *   made), so it never follows such a link; `--one-file-system` keeps it off any mount inside.
 * - Before that, each entry the run's user owns is sealed: opened without following a link,
 *   checked to be a directory, and given to root with mode 0700 through that descriptor. A job
 *   that kept a descriptor of it can no longer add entries faster than `rm` takes them away.
 */

const RM_CANDIDATES = ['/usr/bin/rm', '/bin/rm'];
let rmPath: string | null = null;

/** GNU rm by absolute path (never looked up in a PATH a task could set). */
function rmProgram(): string {
  rmPath ??= RM_CANDIDATES.find((p) => existsSync(p)) ?? null;
  if (!rmPath) throw new Error(`local fleet: removing job files needs GNU rm (coreutils) at ${RM_CANDIDATES.join(' or ')}`);
  return rmPath;
}

/** The entry given to root (0700) through a descriptor that did not follow a link; a non-directory is left as it is. */
async function seal(path: string): Promise<void> {
  let handle;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    // Gone, a symlink (ELOOP) or not a directory: `rm` removes the entry itself, never what it names.
    if (isErrno(err, 'ENOENT') || isErrno(err, 'ELOOP') || isErrno(err, 'ENOTDIR')) return;
    throw err;
  }
  try {
    const { uid } = await handle.stat();
    if (uid === 0 || uid === process.getuid?.()) return;
    await handle.chown(0, 0);
    await handle.chmod(0o700);
  } finally {
    await handle.close();
  }
}

/**
 * Checks that `dir` itself is root's and no link: only then are the paths of its entries ones no
 * job can change (its ancestors are the fleet's state directory, root's too).
 */
async function checkRootsDirectory(dir: string): Promise<boolean> {
  let info;
  try {
    info = await lstat(dir);
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return false;
    throw err;
  }
  const self = process.getuid?.() ?? 0;
  if (!info.isDirectory() || (info.uid !== 0 && info.uid !== self)) {
    throw new Error(`local fleet: refusing to clean up ${dir}: it is not a directory of this worker's user (uid ${info.uid})`);
  }
  return true;
}

/** The entries of the job directory `dir` but the ones named in `kept`, sealed for removal (none when `dir` is gone). */
async function doomedEntries(dir: string, kept: readonly string[]): Promise<string[]> {
  if (!(await checkRootsDirectory(dir))) return [];
  const names = await readdir(dir).catch((err: unknown) => {
    if (isErrno(err, 'ENOENT')) return [];
    throw err;
  });
  const doomed = names.filter((n) => !kept.includes(n)).map((n) => join(dir, n));
  await Promise.all(doomed.map(seal));
  return doomed;
}

async function removeEntries(paths: readonly string[], where: string): Promise<void> {
  if (paths.length === 0) return;
  const r = await spawner.run(rmProgram(), ['-rf', '--one-file-system', '--', ...paths]);
  if (r.code !== 0) {
    const why = r.stderr.trim().split('\n')[0] ?? `exit ${r.code}`;
    throw new Error(`local fleet: could not clean up ${where}: ${why}`);
  }
}

/** Removes everything in the job directory `dir` but the entries named in `kept`. */
export async function keepOnly(dir: string, kept: readonly string[]): Promise<void> {
  await removeEntries(await doomedEntries(dir, kept), dir);
}

/** Most paths one `rm` of keepOnlyAll removes: its arguments stay ~50 KiB, far below the kernel's limit. */
const RM_BATCH = 500;
/**
 * `rm` processes of keepOnlyAll at once: unlinking is the kernel's work in each, so on a busy
 * machine a few of them get through a thousand directories sooner than one.
 */
const RMS_IN_FLIGHT = 4;
/** Directories keepOnlyAll reads and seals at once (each holds a descriptor or two). */
const DIRS_IN_FLIGHT = 32;

/** keepOnly for many job directories: a few `rm` processes for all of them, not one per directory. */
export async function keepOnlyAll(dirs: readonly string[], kept: readonly string[]): Promise<void> {
  const doomed = (await mapLimit(dirs, DIRS_IN_FLIGHT, (dir) => retryFdShortage(() => doomedEntries(dir, kept)))).flat();
  if (doomed.length === 0) return;
  const size = Math.min(RM_BATCH, Math.ceil(doomed.length / RMS_IN_FLIGHT));
  const batches = Array.from({ length: Math.ceil(doomed.length / size) }, (_, i) => doomed.slice(i * size, (i + 1) * size));
  await mapLimit(batches, RMS_IN_FLIGHT, (paths) => removeEntries(paths, `${dirs.length} job directories`));
}

/**
 * Sets a directory's owner and mode through a descriptor opened without following a link (never
 * chown(2) on a path, which follows one): a job directory's own entries, made by root for the run's user.
 * Synchronous: four system calls of microseconds each, which through the libuv thread pool waited
 * behind the worker's other file-system calls (a start made several of these in a row).
 */
export function setDirectoryOwner(path: string, owner: { uid: number; gid: number }, mode: number): void {
  const fd = openSync(path, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    fchownSync(fd, owner.uid, owner.gid);
    fchmodSync(fd, mode);
  } finally {
    closeSync(fd);
  }
}

/**
 * Opens a job's file for reading as root: never through a link, and only a regular file (a FIFO
 * or device put in its place would block or read something else). Null when it does not exist.
 */
export async function openJobFileForReading(path: string): Promise<FileHandle | null> {
  let handle: FileHandle;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null;
    if (isErrno(err, 'ELOOP')) throw new Error(`local fleet: ${path} is a symbolic link; refusing to read it`);
    throw err;
  }
  if (!(await handle.stat()).isFile()) {
    await handle.close();
    throw new Error(`local fleet: ${path} is not a regular file; refusing to read it`);
  }
  return handle;
}
