import type { Client, WorkflowHandle } from '@temporalio/client';
import { afterAll, beforeAll } from 'vitest';
import { TroupeClient } from '../../src/client';
import type { Plan } from '../../src/plan';
import { runWorkflowId } from '../../src/contract/ids';
import type { makeLocalFleet } from './local-fleet';
import { temporalAddress, testClient } from './temporal';
import { startTroupeWorker } from './troupe-worker';

/** A test file's Troupe: a client of the shared dev server, a worker on the local fleet, the SDK over both. */
export interface LocalTroupe {
  client: Client;
  worker: Awaited<ReturnType<typeof startTroupeWorker>>;
  troupe: TroupeClient;
  /** Starts RunWorkflow straight on Temporal with `plan` under a name of its own (stop grace 1 s). */
  startRun(plan: Plan): Promise<WorkflowHandle>;
}

export interface LocalTroupeOptions {
  /** Give the SDK the server's address (for what it connects to itself, such as `troupe.run(...).logs`). */
  address?: boolean;
  /** Before the worker starts (environment it reads). */
  setup?: () => void;
  /** After the worker has stopped and the fleet is removed: the file's own temp dirs. */
  cleanup?: () => void;
}

/**
 * Starts it before the file's tests and stops it after them, the fleet removed last; the fields
 * are set once `beforeAll` has run.
 */
export function useLocalTroupe(fleet: ReturnType<typeof makeLocalFleet>, options: LocalTroupeOptions = {}): LocalTroupe {
  const env = {} as LocalTroupe;
  let runs = 0;
  env.startRun = async (plan) => {
    const name = `${plan.run_name}-${++runs}-${env.worker.taskQueue}`;
    return await env.client.workflow.start('RunWorkflow', {
      taskQueue: env.worker.taskQueue,
      workflowId: runWorkflowId(name),
      args: [{ plan: { ...plan, run_name: name }, backend: 'local', options: { stop_grace_s: 1 } }],
    });
  };
  let closeClient: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    options.setup?.();
    const { client, close } = await testClient();
    closeClient = close;
    env.client = client;
    env.worker = await startTroupeWorker({ local: fleet.backend });
    env.troupe = new TroupeClient(client, { taskQueue: env.worker.taskQueue, ...(options.address === false ? {} : { address: temporalAddress() }) });
  });
  afterAll(async () => {
    await env.worker?.stop();
    await closeClient?.();
    fleet.remove();
    options.cleanup?.();
  });
  return env;
}

/** Stops each named run that is still going and waits for its end: a run a failed test left going is torn down, not leaked. */
export async function stopRunsLeftGoing(troupe: TroupeClient, names: readonly string[]): Promise<void> {
  await Promise.all(
    names.map(async (name) => {
      const run = troupe.run(name);
      if (['DONE', 'FAILED', 'TERMINATED'].includes((await run.state()).status)) return;
      await run.stop();
      await run.wait();
    }),
  );
}
