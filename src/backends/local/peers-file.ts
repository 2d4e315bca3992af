import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PeersFile } from '../backend';
import { JobLayout as L } from '../../runner/job-layout';
import { z } from 'zod';
import { createFileExclusiveSync, isErrno, readTextFileSync, removeFileSync, writeFileAtomicSync, type FileOwner } from './state-files';

/**
 * A local job's `peers.json` (TROUPE_PEERS_FILE): replaced atomically (a reader sees the old book
 * or the new one), never by an older version. Writers of one job, in any worker process, take
 * turns through a lock file, so a retried older write cannot slip in between a newer one's check
 * and its rename. The lock, the check and the write are synchronous (a dozen small calls, part of
 * every job's start: writeFileAtomicSync says why); only waiting for another writer's lock is not.
 */

const LOCK_NAME = '.peers.lock';
const LOCK_WAIT_MS = 10_000;

/**
 * Writes `peers` unless the file holds a later version; false when it was left alone. `alongside`
 * runs after a write, under the same lock (what else follows the book: the node's /etc/hosts), so
 * an older book never overwrites a newer one there either.
 */
export async function writePeersFile(
  jobDir: string,
  peers: PeersFile,
  mode: number,
  owner: FileOwner | null,
  alongside?: () => Promise<void>,
): Promise<boolean> {
  return await withJobLock(join(jobDir, LOCK_NAME), async () => {
    const current = peersVersion(join(jobDir, L.peers));
    if (current !== null && current > peers.version) return false;
    writeFileAtomicSync(join(jobDir, L.peers), peers.json, mode, owner);
    await alongside?.();
    return true;
  });
}

const VersionedSchema = z.object({ version: z.number() });

/** The `version` of the book in `path`, or null when there is none (or it is not a book). */
function peersVersion(path: string): number | null {
  const text = readTextFileSync(path);
  if (text === null) return null;
  try {
    const parsed = VersionedSchema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data.version : null;
  } catch {
    return null;
  }
}

async function withJobLock<T>(lock: string, body: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + LOCK_WAIT_MS;
  while (!createFileExclusiveSync(lock, `${process.pid}\n`)) {
    // A holder killed mid-write leaves its lock behind: its pid is gone, so the lock is taken over.
    if (holderGone(lock)) removeFileSync(lock);
    else if (Date.now() > deadline) throw new Error(`${lock}: still held after ${LOCK_WAIT_MS / 1000}s`);
    else await sleep(5);
  }
  try {
    return await body();
  } finally {
    removeFileSync(lock);
  }
}

function holderGone(lock: string): boolean {
  const text = readTextFileSync(lock);
  if (text === null) return false;
  const pid = Number(text.trim());
  if (!Number.isInteger(pid) || pid <= 0) return true;
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return isErrno(err, 'ESRCH');
  }
}
