import { join } from 'node:path';
import { z } from 'zod';
import { readTextFileSync, writeFileAtomicSync } from './state-files';

/**
 * What a local node's start needs that none of its job's files do (the job directory and its
 * owners, the cgroup with its limits, the run's user, what an isolated job must not see): set up
 * once the node's runner is found ready, beside the run's address exchange and off the launch's
 * path, and recorded in the job directory last, so a start that finds the record finds all of it.
 * A start that finds none (set up by a worker from before this one, or a state cleaned meanwhile)
 * sets it up itself: each step is idempotent. Release removes the record with the job's other
 * files (only RELEASED_JOB_FILES stay).
 */

/** In the job directory, root's alone (0600); gone with the job's other files at release. */
export const PREPARED_FILE = '.troupe-prepared.json';

export const PreparedNodeSchema = z.object({
  /** The run's user the job runs as (isolated jobs), null when jobs are not isolated. */
  user: z.object({ name: z.string().min(1), uid: z.number().int().nonnegative(), gid: z.number().int().nonnegative() }).nullable(),
  /** Why the job runs without limits (its log's first line), null when its cgroup is made with them. */
  cgroup_why: z.string().nullable(),
  /** Directories hidden from an isolated job (hiddenDirectories), null when jobs are not isolated. */
  hide: z.array(z.string().min(1)).nullable(),
});
export type PreparedNode = z.infer<typeof PreparedNodeSchema>;

/** Records the node's set-up as done (atomically: a reader sees all of it or nothing). */
export function recordPrepared(jobDir: string, prepared: PreparedNode): void {
  writeFileAtomicSync(join(jobDir, PREPARED_FILE), JSON.stringify(prepared), 0o600);
}

/**
 * The node's recorded set-up, or null when there is none, or one made for other settings than
 * `isolated` (another worker's): then the start sets it up again. Read synchronously: one small
 * file on the start's path (writeFileAtomicSync says why).
 */
export function readPrepared(jobDir: string, isolated: boolean): PreparedNode | null {
  const text = readTextFileSync(join(jobDir, PREPARED_FILE));
  if (text === null) return null;
  let parsed;
  try {
    parsed = PreparedNodeSchema.safeParse(JSON.parse(text) as unknown);
  } catch {
    return null; // not JSON (it is written atomically, so not a half-written one): set up again
  }
  if (!parsed.success) return null;
  return (parsed.data.user !== null) === isolated && (parsed.data.hide !== null) === isolated ? parsed.data : null;
}
