import type { Client } from '@temporalio/client';
import { afterAll, beforeAll } from 'vitest';
import { TroupeClient } from '../../src/client';
import type { makeLocalFleet } from './local-fleet';
import { temporalAddress, testClient } from './temporal';
import { startTroupeWorker } from './troupe-worker';

/** A test file's Troupe: a client of the shared dev server, a worker on the local fleet, the SDK over both. */
export interface LocalTroupe {
  client: Client;
  worker: Awaited<ReturnType<typeof startTroupeWorker>>;
  troupe: TroupeClient;
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
