import { randomBytes } from 'node:crypto';
import { closeSync, constants, fchownSync, linkSync, openSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { chown, link, mkdir, readdir, readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { z } from 'zod';

/**
 * Files that several worker processes may write at once. A reader never sees half a file: content
 * goes to a private temporary file first, then into place with one atomic system call.
 */

function tempPath(path: string): string {
  return `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
}

export function isErrno(err: unknown, code: string): boolean {
  return err instanceof Error && (err as NodeJS.ErrnoException).code === code;
}

/** Owner and group a file is given before it is put in place (a job's files, for its run's user). */
export interface FileOwner {
  uid: number;
  gid: number;
}

/** Replaces `path` atomically (rename), with its mode and owner set before anyone can open it. */
export async function writeFileAtomic(path: string, content: string, mode = 0o644, owner: FileOwner | null = null): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const tmp = tempPath(path);
  await writeFile(tmp, content, { mode });
  if (owner) await chown(tmp, owner.uid, owner.gid);
  await rename(tmp, path);
}

/**
 * writeFileAtomic without the libuv thread pool, for the small files of a job's start: each of
 * their calls takes microseconds in the kernel, but queued behind the pool's 4 threads (busy with
 * every other file-system call of the worker) a start waited milliseconds per file. The temporary
 * file is made new (O_EXCL), never through a link, and given its owner through its descriptor.
 * `path`'s directory must exist.
 */
export function writeFileAtomicSync(path: string, content: string, mode = 0o644, owner: FileOwner | null = null): void {
  const tmp = writeTempFileSync(path, content, mode, owner);
  renameSync(tmp, path);
}

/** A new temporary file beside `path` with `content` (made new, never through a link, its owner set by descriptor): its path. */
function writeTempFileSync(path: string, content: string, mode: number, owner: FileOwner | null): string {
  const tmp = tempPath(path);
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    writeFileSync(fd, content);
    if (owner) fchownSync(fd, owner.uid, owner.gid);
  } finally {
    closeSync(fd);
  }
  return tmp;
}

/**
 * Creates `path` with `content` only if it does not exist (link(2) fails with EEXIST, atomically,
 * with the content complete). Returns false when another writer was first.
 */
export async function createFileExclusive(path: string, content: string): Promise<boolean> {
  await mkdir(dirname(path), { recursive: true });
  const tmp = tempPath(path);
  await writeFile(tmp, content, { mode: 0o644 });
  try {
    await link(tmp, path);
    return true;
  } catch (err) {
    if (isErrno(err, 'EEXIST')) return false;
    throw err;
  } finally {
    await unlink(tmp).catch(() => undefined);
  }
}

/** createFileExclusive without the thread pool (writeFileAtomicSync says why); `path`'s directory must exist. */
export function createFileExclusiveSync(path: string, content: string): boolean {
  const tmp = writeTempFileSync(path, content, 0o644, null);
  try {
    linkSync(tmp, path);
    return true;
  } catch (err) {
    if (isErrno(err, 'EEXIST')) return false;
    throw err;
  } finally {
    removeFileSync(tmp);
  }
}

/** A temporary file whose writer (by the pid in its name) is gone: left by a process killed mid-write. */
function isOrphanedTemp(name: string): boolean {
  const pid = /\.tmp-(\d+)-[0-9a-f]{8}$/.exec(name)?.[1];
  if (pid === undefined || Number(pid) === process.pid) return false;
  try {
    process.kill(Number(pid), 0);
    return false;
  } catch (err) {
    return isErrno(err, 'ESRCH');
  }
}

/** Removes the temporary files in `dir` whose writers died before renaming or linking them. */
export async function removeOrphanedTemps(dir: string): Promise<void> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return;
    throw err;
  }
  await Promise.all(names.filter(isOrphanedTemp).map((name) => removeFile(join(dir, name))));
}

/** The text of `path`, or null when it does not exist. */
export async function readTextFile(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null;
    throw err;
  }
}

/** Parsed content of `path`, or null when it does not exist. */
export async function readJsonFile<S extends z.ZodType>(path: string, schema: S): Promise<z.infer<S> | null> {
  const text = await readTextFile(path);
  return text === null ? null : schema.parse(JSON.parse(text));
}

/** The text of `path`, or null when it does not exist, without the thread pool (writeFileAtomicSync says why). */
export function readTextFileSync(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null;
    throw err;
  }
}

export function removeFileSync(path: string): void {
  try {
    unlinkSync(path);
  } catch (err) {
    if (!isErrno(err, 'ENOENT')) throw err;
  }
}

export async function removeFile(path: string): Promise<void> {
  await unlink(path).catch((err: unknown) => {
    if (!isErrno(err, 'ENOENT')) throw err;
  });
}

export async function pathExists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return false;
    throw err;
  }
}
