import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { defaultDevServerOptions, startDevServer, stopDevServer } from '../src/devserver/dev-server';
import { loadCodecKeyring } from '../src/codec/codec-keys';
import { startCodecServer } from '../src/codec/codec-server';
import { EncryptionCodec } from '../src/codec/payload-codec';
import { loadCodecToken } from '../src/codec/codec-token';
import { freePort } from './helpers/free-port';

declare module 'vitest' {
  export interface ProvidedContext {
    temporalAddress: string;
    temporalUiAddress: string;
    codecEndpoint: string;
  }
}


/**
 * One real Temporal dev server for the whole test run, on free ports, apart from a user's own; its
 * Web UI decodes payloads through a codec server with the tests' codec key (the project's key file,
 * which the tests' clients and workers use too).
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const stateDir = mkdtempSync(join(tmpdir(), 'troupe-test-temporal-'));
  const uiPort = await freePort();
  const codec = await startCodecServer({
    codec: new EncryptionCodec(loadCodecKeyring({ create: true }), { unencrypted: 'pass' }),
    corsOrigins: [`http://127.0.0.1:${uiPort}`],
    token: loadCodecToken({ create: true }),
    // As the embedded default's sidecar: the dev server's UI sends no credential.
    trustOrigin: true,
    namespaces: [],
    host: '127.0.0.1',
    port: 0,
  });
  const opts = defaultDevServerOptions({ stateDir, port: await freePort(), uiPort, dbFile: null, codecEndpoint: codec.url });
  const server = await startDevServer(opts);
  project.provide('temporalAddress', server.address);
  project.provide('temporalUiAddress', server.uiAddress);
  project.provide('codecEndpoint', codec.url);
  return async () => {
    await new Promise((resolve) => codec.server.close(resolve));
    await stopDevServer(opts);
    rmSync(stateDir, { recursive: true, force: true });
  };
}
