import type { Client } from '@temporalio/client';
import { RunStatusSchema } from '../contract/run-state-schema';
import type { RunStatusCounter } from '../metrics/troupe-metrics';
import { TroupeSearchAttributes } from '../client/search-attributes';

/** Counting is a visibility query per status: a scrape every few seconds asks at most this often. */
const CACHE_MS = 10_000;

/**
 * Runs by status for `troupe_runs`, from Temporal visibility (the TroupeRunStatus attribute that
 * `troupe setup` registers): one count per status, cached for ten seconds.
 */
export function runStatusCounter(client: Client): RunStatusCounter {
  let cached: { at: number; counts: Promise<Record<string, number>> } | null = null;
  const count = async (): Promise<Record<string, number>> => {
    const statuses = RunStatusSchema.options;
    const answers = await Promise.all(
      statuses.map((status) => client.workflow.count(`WorkflowType = "RunWorkflow" AND ${TroupeSearchAttributes.runStatus.name} = "${status}"`)),
    );
    return Object.fromEntries(statuses.map((status, i) => [status, answers[i]?.count ?? 0]));
  };
  return () => {
    if (!cached || Date.now() - cached.at > CACHE_MS) {
      const counts = count();
      cached = { at: Date.now(), counts };
      counts.catch(() => (cached = null));
    }
    return cached.counts;
  };
}
