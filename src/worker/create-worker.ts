import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NativeConnection, WorkflowBundle } from '@temporalio/worker';
import { Worker, bundleWorkflowCode } from '@temporalio/worker';
import { createActivities, type BackendRegistry } from '../../activities';
import { LocalBackend } from '../backends/local/local-backend';

export const workflowsPath = fileURLToPath(new URL('../../workflows/index.ts', import.meta.url));

export interface TroupeWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  backends: BackendRegistry;
  /** A pre-built bundle (tests bundle once per file); bundled from source when absent. */
  workflowBundle?: WorkflowBundle;
  /** An identity shown in the Web UI (default: host and pid). */
  identity?: string;
}

/** webpack's statistics are noise to a worker's user; its warnings and errors are not. */
export const quietBundler = {
  log: () => undefined,
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: (message: string, meta?: Record<string, unknown>) => console.warn(message, meta ?? ''),
  error: (message: string, meta?: Record<string, unknown>) => console.error(message, meta ?? ''),
};

/** A worker that runs Troupe's workflows and drives the given backends. */
export async function createTroupeWorker(opts: TroupeWorkerOptions): Promise<Worker> {
  return await Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    workflowBundle: opts.workflowBundle ?? (await bundleWorkflowCode({ workflowsPath, logger: quietBundler })),
    activities: createActivities(opts.backends),
    ...(opts.identity ? { identity: opts.identity } : {}),
  });
}

/** The backends every worker has: the local fleet (processes on this machine). */
export function defaultBackends(opts: { stateDir: string }): BackendRegistry {
  return {
    local: new LocalBackend({ stateDir: join(opts.stateDir, 'local'), network: 'auto' }),
  };
}
