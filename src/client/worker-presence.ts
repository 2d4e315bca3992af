import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@temporalio/client';
import { NoWorkerError, type TaskQueueLocation } from './errors';

/** TaskQueueType numbers of the Temporal API. */
const queueTypes = { workflow: 1, activity: 2 } as const;

/**
 * Which kinds of pollers (workflow, activity) the task queue lacks. A Troupe worker polls both; a
 * run started without one would sit in SUBMITTED forever, so callers check first. The server
 * keeps a poller listed for a few minutes after it was last seen, so a worker that has just died
 * may still count: this catches "never started", not "crashed a moment ago".
 */
export async function missingPollers(
  client: Client,
  where: TaskQueueLocation,
): Promise<Array<'workflow' | 'activity'>> {
  const kinds = Object.keys(queueTypes) as Array<keyof typeof queueTypes>;
  const counts = await Promise.all(
    kinds.map(async (kind) => {
      const response = await client.workflowService.describeTaskQueue({
        namespace: where.namespace,
        taskQueue: { name: where.taskQueue },
        taskQueueType: queueTypes[kind],
      });
      return response.pollers?.length ?? 0;
    }),
  );
  return kinds.filter((_, i) => counts[i] === 0);
}

/**
 * Throws NoWorkerError naming the queue, namespace and address when a kind of poller is missing.
 * Looks again for a moment first: a worker that has just started may not have polled both kinds yet.
 */
export async function assertWorkersPolling(
  client: Client,
  where: TaskQueueLocation,
  purpose: string,
  graceMs = 2_000,
): Promise<void> {
  const deadline = Date.now() + graceMs;
  let missing = await missingPollers(client, where);
  while (missing.length > 0 && Date.now() < deadline) {
    await sleep(250);
    missing = await missingPollers(client, where);
  }
  if (missing.length > 0) throw new NoWorkerError(where, missing, purpose);
}
