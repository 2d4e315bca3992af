import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { SecretKeyError, secretKeyFile, type SealedEntry } from './sealed-env';

/**
 * A submission's seal nonce belongs to the first run execution that received it (in its start
 * input, or in an apply's update to a running service): the run's workflow id and its first
 * execution's run id, both as Temporal reports them (never from the run's input). A later run that
 * reuses the workflow id once the first has closed, with values copied from the first run's
 * history, is refused: an earlier execution of that id carries the nonce.
 *
 * Temporal is the record every worker of a namespace shares (nothing a client could create first
 * decides): a worker that has not seen a nonce asks it when the run started and which executions of
 * its workflow id, started before the run and closed since the sealing, carry the nonce
 * (seal-history.ts), and decides with decideSealOpening. The seal time bounds the question: such an
 * execution stays listed for the namespace's retention after it closed, so a worker answers only
 * within the retention after the sealing (clocks of the sealing side and the service within
 * SEAL_CLOCK_SKEW_MS); and a value first opens in a run started no later than OPEN_WINDOW_MS after
 * its sealing (a submission's run starts at once; an apply's run was already going).
 *
 * What a worker decided is kept as a file per nonce (named by the nonce's hash) in a directory
 * beside the secret key (TROUPE_SEAL_BINDINGS_DIR overrides it), mode 0700, files 0600, created
 * exclusively: the next batch on this machine need not ask again.
 */

export interface RunExecution {
  workflowId: string;
  firstRunId: string;
}

export type BindingDecision = 'bind' | 'same-run' | 'other-run';

/** Clocks of the sealing side and the Temporal service may differ by this much. */
export const SEAL_CLOCK_SKEW_MS = 10 * 60_000;
/** A sealed value first opens in a run started within this long after its sealing. */
export const OPEN_WINDOW_MS = 60 * 60_000;

/** What Temporal says of a run that wants to open a submission's values. */
export interface SealFacts {
  /** When the run's first execution started (the service's clock). */
  runStartMs: number;
  /** Run ids of the executions of the same workflow id, started before it and closed since the sealing, whose history carries the nonce. */
  earlierCarrying: readonly string[];
  /** The namespace's retention of closed executions. */
  retentionMs: number;
}

/** Temporal's answers for one run and one submission (seal-history.ts reads them). */
export type SealFactsOf = (run: RunExecution, seal: { nonce: string; sealedAtMs: number }) => Promise<SealFacts>;

export type SealOpening =
  | { kind: 'open' }
  | { kind: 'retention-too-short' }
  | { kind: 'sealed-in-future' }
  | { kind: 'started-too-late' }
  | { kind: 'too-old-to-prove' }
  | { kind: 'earlier-run'; runId: string };

/**
 * Pure: whether a run may first open a submission sealed at `sealedAtMs`. Refused when the
 * retention does not outlast the window (an earlier run could vanish from the listing), when the
 * sealing clock is ahead of this one (the bounds below would not hold), when the run started more
 * than OPEN_WINDOW_MS after the sealing, when so long has passed since the sealing that an earlier
 * run may have been deleted, or when an earlier run carries it.
 */
export function decideSealOpening(sealedAtMs: number, facts: SealFacts, nowMs: number): SealOpening {
  if (facts.retentionMs <= OPEN_WINDOW_MS + SEAL_CLOCK_SKEW_MS) return { kind: 'retention-too-short' };
  if (sealedAtMs > nowMs + SEAL_CLOCK_SKEW_MS) return { kind: 'sealed-in-future' };
  if (facts.runStartMs > sealedAtMs + OPEN_WINDOW_MS) return { kind: 'started-too-late' };
  // An earlier run that carries the nonce closed after the sealing: it stays listed for the retention after that.
  if (nowMs >= sealedAtMs - SEAL_CLOCK_SKEW_MS + facts.retentionMs) return { kind: 'too-old-to-prove' };
  const [earlier] = facts.earlierCarrying;
  return earlier === undefined ? { kind: 'open' } : { kind: 'earlier-run', runId: earlier };
}

/** Pure: what a nonce's local record (null: none yet) says of a run that wants to use it. */
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

const hours = (ms: number): string => `${+(ms / 3_600_000).toFixed(2)} h`;
const iso = (ms: number): string => new Date(ms).toISOString();

function refusal(name: string, run: RunExecution, sealedAtMs: number, facts: SealFacts, opening: Exclude<SealOpening, { kind: 'open' }>): SecretKeyError {
  const again = 'a sealed value opens only in the run it was submitted with: submit again with troupe apply';
  const execution = `execution ${run.firstRunId} of ${run.workflowId}`;
  switch (opening.kind) {
    case 'retention-too-short':
      return new SecretKeyError(
        `env ${name}: the namespace keeps closed workflows for ${hours(facts.retentionMs)}, too short to tell whose a sealed value is: set its retention above ${hours(OPEN_WINDOW_MS + SEAL_CLOCK_SKEW_MS)} (temporal operator namespace update --retention)`,
      );
    case 'sealed-in-future':
      return new SecretKeyError(
        `env ${name}: this sealed value was sealed at ${iso(sealedAtMs)}, later than this worker's clock says it is: the clock of the machine that submitted it is ahead; set it right and submit again with troupe apply`,
      );
    case 'started-too-late':
      return new SecretKeyError(
        `env ${name}: ${execution} started at ${iso(facts.runStartMs)}, more than ${hours(OPEN_WINDOW_MS)} after this value was sealed (${iso(sealedAtMs)}); ${again}`,
      );
    case 'too-old-to-prove':
      return new SecretKeyError(
        `env ${name}: this sealed value was sealed at ${iso(sealedAtMs)}, longer ago than the namespace's retention (${hours(facts.retentionMs)}), and this worker machine has not opened it before: Temporal may no longer hold the runs that show whose it is; ${again}`,
      );
    case 'earlier-run':
      return new SecretKeyError(`env ${name}: this sealed value belongs to an earlier run of ${run.workflowId} (execution ${opening.runId}, not ${run.firstRunId}); ${again}`);
  }
}

/**
 * Checks that each submission's nonce belongs to the run, from this machine's record or else from
 * Temporal (then recorded); throws a SecretKeyError naming the variable when it belongs to another.
 */
export async function bindSealNonces(
  entries: readonly SealedEntry[],
  run: RunExecution,
  factsOf: SealFactsOf,
  opts: { dir?: string; now?: () => number } = {},
): Promise<void> {
  if (entries.length === 0) return;
  const dir = opts.dir ?? sealBindingsDir();
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const done = new Set<string>();
  for (const { name, nonce, sealedAtMs } of entries) {
    if (done.has(nonce)) continue;
    done.add(nonce);
    const file = recordFile(dir, nonce);
    let recorded = readRecord(file);
    let decision = decideBinding(recorded, run);
    if (decision === 'bind') {
      const facts = await factsOf(run, { nonce, sealedAtMs });
      const opening = decideSealOpening(sealedAtMs, facts, (opts.now ?? Date.now)());
      if (opening.kind !== 'open') throw refusal(name, run, sealedAtMs, facts, opening);
      try {
        writeFileSync(file, `${run.workflowId}\n${run.firstRunId}\n`, { mode: 0o600, flag: 'wx' });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        // Another worker of this machine recorded it meanwhile: its record decides.
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
