import { WorkflowNotFoundError, type Client, type WorkflowExecutionDescription } from '@temporalio/client';
import type { Backend, HeldRun } from '../backends/backend';

/**
 * Teardown always runs, also when a run's workflow never gets to it (issue 29, finding 4): after
 * `temporal workflow terminate` (the Web UI's Terminate), a timeout, or a reset that leaves
 * nothing of the run open, its jobs would run on with their env files, users, namespaces and
 * machines. Every worker reaps: each pass asks its backends what they hold (heldRuns) and Temporal
 * whether the run of each is still open, and releases (releaseRun, the teardown a run ends with)
 * what belongs to a closed one. Several workers may reap the same run at once: releaseRun is
 * idempotent in every backend.
 */

/** `open`: an execution of the run runs (a continue-as-new or a reset goes on in a new one). */
export type RunChainStatus = { kind: 'open' } | { kind: 'closed'; as: string } | { kind: 'unknown' };

const OPEN = new Set(['RUNNING', 'CONTINUED_AS_NEW']);

/** The first execution's run id of the chain `description` belongs to. */
async function firstRunOf(client: Client, description: WorkflowExecutionDescription): Promise<string | null> {
  const known = description.raw.workflowExecutionInfo?.firstRunId;
  if (known) return known;
  // Servers before firstRunId was reported: the chain's start event names it.
  const { history } = await client.workflowService.getWorkflowExecutionHistory({
    namespace: client.options.namespace,
    execution: { workflowId: description.workflowId, runId: description.runId },
    maximumPageSize: 1,
  });
  return history?.events?.[0]?.workflowExecutionStartedEventAttributes?.firstExecutionRunId ?? null;
}

async function describeOrNull(client: Client, workflowId: string, runId?: string): Promise<WorkflowExecutionDescription | null> {
  try {
    return await client.workflow.getHandle(workflowId, runId).describe();
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return null;
    throw err;
  }
}

/**
 * Whether the run whose first execution is `firstRunId` is open: its first execution runs, or the
 * latest execution of its workflow id belongs to it (same first execution) and runs. `unknown`:
 * this namespace has never heard of it (another Temporal service's run, or one past retention).
 */
export async function runChainStatus(client: Client, workflowId: string, firstRunId: string): Promise<RunChainStatus> {
  const first = await describeOrNull(client, workflowId, firstRunId);
  if (!first) return { kind: 'unknown' };
  if (first.status.name === 'RUNNING') return { kind: 'open' };
  const latest = await describeOrNull(client, workflowId);
  if (latest && latest.runId !== firstRunId && (await firstRunOf(client, latest)) === firstRunId) {
    return OPEN.has(latest.status.name) ? { kind: 'open' } : { kind: 'closed', as: latest.status.name };
  }
  return first.status.name === 'CONTINUED_AS_NEW' ? { kind: 'closed', as: 'CLOSED' } : { kind: 'closed', as: first.status.name };
}

export interface Reaped {
  backend: string;
  run: HeldRun;
  /** How the run's workflow had closed (TERMINATED, TIMED_OUT, …). */
  closedAs: string;
}

/** What the reaper needs of a backend. */
export type ReapableBackend = Pick<Backend, 'heldRuns' | 'releaseRun'>;

export interface RunReaperOptions {
  client: Client;
  backends: Readonly<Record<string, ReapableBackend>>;
  /** Between passes; default 20 s, so a closed run is torn down well within a minute. */
  intervalMs?: number;
  /** One line per run reaped or not reaped (default: standard error). */
  log?: (line: string) => void;
}

export const DEFAULT_REAPER_INTERVAL_MS = 20_000;

export class RunReaper {
  private timer: NodeJS.Timeout | null = null;
  private pass: Promise<unknown> = Promise.resolve();
  private stopped = true;
  /** Runs this namespace knew: one it no longer knows (retention) is closed, not another service's. */
  private readonly known = new Set<string>();
  private readonly log: (line: string) => void;

  constructor(private readonly options: RunReaperOptions) {
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
  }

  /** Reaps now, then every interval, until stop(). */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    const tick = () => {
      this.pass = this.reapOnce()
        .catch((err: unknown) => this.log(`reaper: a pass failed: ${err instanceof Error ? err.message : String(err)}`))
        .finally(() => {
          if (!this.stopped) this.timer = setTimeout(tick, this.options.intervalMs ?? DEFAULT_REAPER_INTERVAL_MS);
        });
    };
    tick();
  }

  /** No new pass; waits for the one under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.pass;
  }

  /** One pass over every backend: what it holds for closed runs is released. */
  async reapOnce(): Promise<Reaped[]> {
    const reaped: Reaped[] = [];
    for (const [name, backend] of Object.entries(this.options.backends)) {
      if (!backend.heldRuns) continue;
      let held: HeldRun[];
      try {
        held = await backend.heldRuns();
      } catch (err) {
        // One backend that cannot say (a fleet's workflow not answering) does not hold up the others.
        this.log(`reaper: could not list what backend ${name} holds: ${err instanceof Error ? err.message : String(err)}`);
        continue;
      }
      await Promise.all(
        held.map(async (run) => {
          const closedAs = await this.closedAs(run);
          if (closedAs === null) return;
          try {
            await backend.releaseRun(run.run_id, run.submission);
            reaped.push({ backend: name, run, closedAs });
            this.log(`reaper: run ${run.run_workflow_id} (submission ${run.submission}) had closed (${closedAs}) without its teardown; released ${run.holds}`);
          } catch (err) {
            this.log(`reaper: could not release run ${run.run_workflow_id} (submission ${run.submission}): ${err instanceof Error ? err.message : String(err)}; trying again next pass`);
          }
        }),
      );
    }
    return reaped;
  }

  /** How the run closed, or null while it is open (or unknown here, or could not be asked). */
  private async closedAs(run: HeldRun): Promise<string | null> {
    let status: RunChainStatus;
    try {
      status = await runChainStatus(this.options.client, run.run_workflow_id, run.run_id);
    } catch {
      return null;
    }
    if (status.kind === 'open') {
      this.known.add(run.run_id);
      return null;
    }
    if (status.kind === 'closed') return status.as;
    return this.known.has(run.run_id) ? 'GONE' : null;
  }
}
