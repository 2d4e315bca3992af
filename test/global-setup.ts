import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { defaultDevServerOptions, startDevServer, stopDevServer } from '../src/devserver/dev-server';
import { freePort } from './helpers/free-port';

declare module 'vitest' {
  export interface ProvidedContext {
    temporalAddress: string;
    temporalUiAddress: string;
  }
}


/** One real Temporal dev server for the whole test run, on free ports, apart from a user's own. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const stateDir = mkdtempSync(join(tmpdir(), 'troupe-test-temporal-'));
  const opts = defaultDevServerOptions({ stateDir, port: await freePort(), uiPort: await freePort(), dbFile: null });
  const server = await startDevServer(opts);
  project.provide('temporalAddress', server.address);
  project.provide('temporalUiAddress', server.uiAddress);
  return async () => {
    await stopDevServer(opts);
    rmSync(stateDir, { recursive: true, force: true });
  };
}
