import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@temporalio/client';
import { backendsOfWorkerIdentity } from '../backends/backend-names';
import { NoBackendError, NoWorkerError, type TaskQueueLocation } from './errors';

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
  const { missing } = await pollersOf(client, where);
  return missing;
}

async function pollersOf(client: Client, where: TaskQueueLocation): Promise<{ missing: Array<'workflow' | 'activity'>; activityIdentities: string[] }> {
  const kinds = Object.keys(queueTypes) as Array<keyof typeof queueTypes>;
  const identities = await Promise.all(
    kinds.map(async (kind) => {
      const response = await client.workflowService.describeTaskQueue({
        namespace: where.namespace,
        taskQueue: { name: where.taskQueue },
        taskQueueType: queueTypes[kind],
      });
      return (response.pollers ?? []).map((p) => p.identity ?? '');
    }),
  );
  return { missing: kinds.filter((_, i) => identities[i]?.length === 0), activityIdentities: identities[kinds.indexOf('activity')] ?? [] };
}

/**
 * Pure: whether the activity pollers can drive `backend`. Only pollers that name their backends
 * can say no; one that names none (another program, an older worker) may have it.
 */
export function backendOffered(identities: readonly string[], backend: string): { offered: boolean; known: string[] } {
  const named = identities.map(backendsOfWorkerIdentity);
  const known = [...new Set(named.flatMap((b) => b ?? []))].sort();
  return { offered: named.some((b) => b === null || b.includes(backend)), known };
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
  backend?: string,
): Promise<void> {
  const deadline = Date.now() + graceMs;
  let pollers = await pollersOf(client, where);
  while (pollers.missing.length > 0 && Date.now() < deadline) {
    await sleep(250);
    pollers = await pollersOf(client, where);
  }
  if (pollers.missing.length > 0) throw new NoWorkerError(where, pollers.missing, purpose);
  if (backend === undefined) return;
  const { offered, known } = backendOffered(pollers.activityIdentities, backend);
  if (!offered) throw new NoBackendError(where, backend, known, purpose);
}
