import { lstatSync, readdirSync, readFileSync, type Stats } from 'node:fs';
import { join } from 'node:path';

/**
 * Reading a directory that other processes change while we look (a database's journal, a fleet's
 * leases and records, a live run's job directories): what is listed may be gone a moment later.
 * Each helper reads what is there when it looks and skips what vanished between the listing and
 * the read; a test asserts on the result the entries that must exist. Any error but ENOENT
 * (ENOTDIR: a file where the listing said a folder) is thrown as it is.
 */

function gone(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

/** Names in `dir` (none if `dir` is gone). */
export function listNow(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch (err) {
    if (gone(err)) return [];
    throw err;
  }
}

/** The entries of `dir` that `keep` accepts, each with its lstat, as they are now. */
export function statNow(dir: string, keep: (name: string) => boolean = () => true): Array<{ name: string; stat: Stats }> {
  return listNow(dir)
    .filter(keep)
    .flatMap((name) => {
      const stat = lstatSync(join(dir, name), { throwIfNoEntry: false });
      return stat ? [{ name, stat }] : [];
    });
}

/** The text of the file at `path`, or null if it is gone. */
export function readFileNow(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if (gone(err)) return null;
    throw err;
  }
}

/** The text of each file of `dir` that `keep` accepts and that is still there when read. */
export function readNow(dir: string, keep: (name: string) => boolean = () => true): Array<{ name: string; text: string }> {
  return listNow(dir)
    .filter(keep)
    .flatMap((name) => {
      const text = readFileNow(join(dir, name));
      return text === null ? [] : [{ name, text }];
    });
}

/**
 * Paths of files under `dir`, relative to it, walked folder by folder: a folder removed during the
 * walk is skipped (`readdirSync(dir, { recursive: true })` throws ENOENT for it).
 */
export function filesUnderNow(dir: string, rel = ''): string[] {
  return statNow(join(dir, rel)).flatMap(({ name, stat }) => {
    const path = rel ? join(rel, name) : name;
    if (stat.isDirectory()) return filesUnderNow(dir, path);
    return stat.isFile() ? [path] : [];
  });
}

/** Every file named `name` under `dir` (absolute paths), as the walk finds them. */
export function filesNamedNow(dir: string, name: string): string[] {
  return filesUnderNow(dir)
    .filter((p) => p.split('/').pop() === name)
    .map((p) => join(dir, p));
}
