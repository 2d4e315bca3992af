import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { SecretKeyError, secretKeyFile } from './sealed-env';

/**
 * A submission's seal nonce is bound, on first use, to the execution of the run that used it: the
 * run's workflow id and its first execution's run id, both as Temporal reports them (never from
 * the run's input). A later run that reuses the workflow id once the first has closed, with values
 * copied from the first run's input, is then refused: its first execution differs.
 *
 * The record is a file per nonce (named by the nonce's hash) in a directory beside the secret key
 * (TROUPE_SEAL_BINDINGS_DIR overrides it), mode 0700, files 0600, created exclusively so two
 * workers of one machine cannot both bind a nonce.
 */

export interface RunExecution {
  workflowId: string;
  firstRunId: string;
}

export type BindingDecision = 'bind' | 'same-run' | 'other-run';

/** Pure: what a nonce's record (null: none yet) says of a run that wants to use it. */
export function decideBinding(recorded: RunExecution | null, run: RunExecution): BindingDecision {
  if (recorded === null) return 'bind';
  return recorded.workflowId === run.workflowId && recorded.firstRunId === run.firstRunId ? 'same-run' : 'other-run';
}

export function sealBindingsDir(): string {
  return process.env.TROUPE_SEAL_BINDINGS_DIR ?? join(dirname(secretKeyFile()), 'seal-bindings');
}

function recordFile(dir: string, nonce: string): string {
  return join(dir, createHash('sha256').update(nonce).digest('hex'));
}

function readRecord(file: string): RunExecution | null {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  const [workflowId, firstRunId] = text.split('\n');
  if (!workflowId || !firstRunId) throw new SecretKeyError(`${file}: a seal binding record is damaged; remove it only if no run of that seal is alive`);
  return { workflowId, firstRunId };
}

/**
 * Binds each nonce to the run (the first time) or checks it is bound to this run; throws a
 * SecretKeyError naming the variable when a nonce belongs to another execution.
 */
export function bindSealNonces(entries: ReadonlyArray<{ name: string; nonce: string }>, run: RunExecution, dir = sealBindingsDir()): void {
  if (entries.length === 0) return;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const done = new Set<string>();
  let recorded: RunExecution | null = null;
  for (const { name, nonce } of entries) {
    if (done.has(nonce)) continue;
    done.add(nonce);
    const file = recordFile(dir, nonce);
    recorded = readRecord(file);
    let decision = decideBinding(recorded, run);
    if (decision === 'bind') {
      try {
        writeFileSync(file, `${run.workflowId}\n${run.firstRunId}\n`, { mode: 0o600, flag: 'wx' });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        // Another worker of this machine bound it first: its record decides.
        recorded = readRecord(file);
        decision = decideBinding(recorded, run);
      }
    }
    if (decision === 'other-run') {
      const owner = recorded?.workflowId === run.workflowId ? `an earlier run of ${run.workflowId}` : `the run ${recorded?.workflowId ?? '?'}`;
      throw new SecretKeyError(
        `env ${name}: this sealed value belongs to ${owner} (not execution ${run.firstRunId} of ${run.workflowId}); a sealed value opens only in the run it was submitted with: submit again with troupe apply`,
      );
    }
  }
}
