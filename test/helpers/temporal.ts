import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { inject } from 'vitest';
import { troupeDataConverter } from '../../src/codec/data-converter';

/** Clients and workers against the one dev server started by test/global-setup.ts. */

export function temporalAddress(): string {
  return inject('temporalAddress');
}

export async function testClient(): Promise<{ client: Client; close: () => Promise<void> }> {
  const connection = await Connection.connect({ address: temporalAddress() });
  return { client: new Client({ connection, dataConverter: troupeDataConverter() }), close: () => connection.close() };
}

export function uniqueTaskQueue(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/** Starts a worker and returns a function that shuts it down and waits for it. */
export async function startWorker(
  options: Omit<WorkerOptions, 'connection'>,
): Promise<{ worker: Worker; stop: () => Promise<void> }> {
  const connection = await NativeConnection.connect({ address: temporalAddress() });
  const worker = await Worker.create({ dataConverter: troupeDataConverter(), ...options, connection });
  const running = worker.run();
  return {
    worker,
    stop: async () => {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running;
      await connection.close();
    },
  };
}
