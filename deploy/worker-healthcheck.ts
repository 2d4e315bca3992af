import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Client } from '@temporalio/client';
import { tsToMs } from '@temporalio/common/lib/time';
import { connectClient, connectionSettings, describeConnection } from '../src/cli/connection';

/**
 * A container's health check for `troupe worker`: healthy when a worker of THIS machine (the SDK's
 * default identity is `<pid>@<hostname>`, to which Troupe adds ` backends=…`; a container's hostname is its own) has lately polled
 * the task queue for both workflow and activity tasks. A live process that lost its connection,
 * or never registered, is unhealthy; the process being up is not enough.
 *
 *   node --import tsx deploy/worker-healthcheck.ts     exit 0 healthy, 1 not (Docker's meanings)
 *
 * Connection settings come from the same environment as the worker's (TEMPORAL_ADDRESS, the TEMPORAL_TLS_* files, …).
 */

/** TaskQueueType numbers of the Temporal API. */
const queueTypes = { workflow: 1, activity: 2 } as const;
export type TaskKind = keyof typeof queueTypes;

/** An idle worker re-polls about once a minute (the server's long-poll timeout); allow two. */
export const DEFAULT_MAX_POLL_AGE_MS = 150_000;

export interface PollerCheck {
  namespace: string;
  taskQueue: string;
  /** Matches pollers whose identity ends with `@<host>` (before the ` backends=…` a Troupe worker adds). */
  host: string;
  maxPollAgeMs: number;
  now: number;
}

/** The kinds of task this host's worker has not polled for within the allowed age. */
export async function kindsNotPolled(client: Client, check: PollerCheck): Promise<TaskKind[]> {
  const kinds = Object.keys(queueTypes) as TaskKind[];
  const polled = await Promise.all(
    kinds.map(async (kind) => {
      const { pollers } = await client.workflowService.describeTaskQueue({
        namespace: check.namespace,
        taskQueue: { name: check.taskQueue },
        taskQueueType: queueTypes[kind],
      });
      return (pollers ?? []).some(
        (p) =>
          (p.identity ?? '').replace(/ backends=[a-z0-9,-]*$/, '').endsWith(`@${check.host}`) &&
          check.now - tsToMs(p.lastAccessTime) <= check.maxPollAgeMs,
      );
    }),
  );
  return kinds.filter((_, i) => !polled[i]);
}

async function main(): Promise<number> {
  const settings = connectionSettings({});
  const client = await connectClient(settings);
  try {
    const host = hostname();
    const missing = await kindsNotPolled(client.temporal, {
      namespace: settings.namespace,
      taskQueue: settings.taskQueue,
      host,
      maxPollAgeMs: DEFAULT_MAX_POLL_AGE_MS,
      now: Date.now(),
    });
    if (missing.length > 0) {
      process.stdout.write(`unhealthy: no ${missing.join(' or ')} poll from a worker on ${host} lately; ${describeConnection(settings)}\n`);
      return 1;
    }
    process.stdout.write(`healthy: the worker on ${host} polls; ${describeConnection(settings)}\n`);
    return 0;
  } finally {
    await client.close();
  }
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    process.exitCode = await main();
  } catch (err) {
    process.stdout.write(`unhealthy: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  }
}
