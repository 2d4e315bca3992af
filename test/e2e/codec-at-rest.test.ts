import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { NativeConnection, type Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeClient } from '../../src/client';
import { loadCodecKeyring } from '../../src/codec/codec-keys';
import { startCodecServer } from '../../src/codec/codec-server';
import { EncryptionCodec } from '../../src/codec/payload-codec';
import { defaultDevServerOptions, startDevServer, stopDevServer, type DevServerOptions } from '../../src/devserver/dev-server';
import { createTroupeWorker } from '../../src/worker/create-worker';
import { freePort } from '../helpers/free-port';
import { historiesText, showPayloads } from '../helpers/history-text';
import { makeLocalFleet } from '../helpers/local-fleet';
import { uniqueTaskQueue } from '../helpers/temporal';
import { troupeWorkflowBundle } from '../helpers/troupe-worker';

/**
 * Nothing a job prints and no secret is stored in clear in Temporal: a run on the local fleet
 * against a dev server of its own with its database in a file, then the file's bytes (database,
 * WAL, shared memory; while running and after the server checkpointed and stopped) and
 * `temporal workflow show` of every workflow are searched for two canaries. Positive controls:
 * the same `workflow show` through the codec server shows both canaries, and the run's name (a
 * search attribute, stored in clear by design) is found in the file.
 */

const fleet = makeLocalFleet('troupe-codec-at-rest-');
const stateDir = mkdtempSync(join(tmpdir(), 'troupe-codec-at-rest-server-'));
const temporalBin = defaultDevServerOptions().temporalBin;
const half = () => randomBytes(8).toString('hex');
// The printed canary is made by the job from two halves: it appears in no config, only in output.
const [printedA, printedB] = [half(), half()];
const printed = `PRINTED${printedA}${printedB}`;
const envSecret = `ENVSECRET${half()}${half()}`;
const runName = `codec-rest-${half().slice(0, 8)}`;
const taskQueue = uniqueTaskQueue('codec-rest');

let opts: DevServerOptions;
let address: string;
let connection: NativeConnection;
let worker: Worker;
let running: Promise<void>;
let troupe: TroupeClient;
let codecServer: Server;
let codecUrl: string;
const codecToken = randomBytes(24).toString('hex');

beforeAll(async () => {
  opts = defaultDevServerOptions({ stateDir, port: await freePort(), uiPort: await freePort(), dbFile: join(stateDir, 'temporal.db'), codecEndpoint: null });
  address = (await startDevServer(opts)).address;
  connection = await NativeConnection.connect({ address });
  worker = await createTroupeWorker({ connection, namespace: 'default', taskQueue, backends: { local: fleet.backend }, workflowBundle: await troupeWorkflowBundle() });
  running = worker.run();
  troupe = await TroupeClient.connect({ address, taskQueue });
  ({ server: codecServer, url: codecUrl } = await startCodecServer({
    codec: new EncryptionCodec(loadCodecKeyring({ create: false }), { unencrypted: 'pass' }),
    corsOrigins: [],
    namespaces: [],
    token: codecToken,
    host: '127.0.0.1',
    port: 0,
  }));
});

afterAll(async () => {
  if (worker?.getState() === 'RUNNING') worker.shutdown();
  await running;
  await connection?.close();
  await troupe?.close();
  await new Promise((r) => codecServer?.close(r));
  if (opts) await stopDevServer(opts);
  rmSync(stateDir, { recursive: true, force: true });
  fleet.remove();
});

/** The dev server's database and its WAL / shared-memory files, as they are on disk now. */
function databaseFiles(): Array<{ name: string; bytes: Buffer }> {
  return readdirSync(stateDir)
    .filter((name) => name.startsWith('temporal.db'))
    .map((name) => ({ name, bytes: readFileSync(join(stateDir, name)) }));
}

function filesHolding(needle: string): string[] {
  return databaseFiles()
    .filter(({ bytes }) => bytes.includes(needle) || bytes.includes(Buffer.from(needle, 'utf16le')))
    .map(({ name }) => name);
}

/** The history as the CLI prints it, payload data (base64 there) shown as text. Asynchronous: the codec server it may call runs in this process. */
async function workflowShow(workflowId: string, codecEndpoint: string | null): Promise<string> {
  const args = ['workflow', 'show', '--address', address, '--workflow-id', workflowId, '--output', 'json'];
  const { stdout } = await promisify(execFile)(temporalBin, [...args, ...(codecEndpoint ? ['--codec-endpoint', codecEndpoint, '--codec-auth', `Bearer ${codecToken}`] : [])], {
    timeout: 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  return JSON.stringify(await showPayloads(JSON.parse(stdout), null));
}

async function showAll(ids: string[], codecEndpoint: string | null): Promise<string> {
  const outputs: string[] = [];
  for (const id of ids) outputs.push(await workflowShow(id, codecEndpoint));
  return outputs.join('\n');
}

describe('payloads at rest', () => {
  it('a canary printed by a job and a secret_env value are nowhere in the database nor in workflow show', async () => {
    const yaml = [
      'type: task',
      `name: ${runName}`,
      'env:',
      `  - DB_THING=${envSecret}`,
      'secret_env: [DB_THING]',
      'groups:',
      '  - name: talk',
      '    commands:',
      `      - printf 'PRINTED%s%s\\n' ${printedA} ${printedB}`,
      '      - echo "the env value is $DB_THING"',
      '      - sleep 2',
      '      - exit 3',
      '  - name: probe',
      '    ready:',
      `      command: "printf 'PRINTED%s%s' ${printedA} ${printedB}; echo \\"$DB_THING\\"; exit 1"`,
      '      interval: 500ms',
      '      timeout: 2s',
      '    commands:',
      '      - sleep 30',
      '',
    ].join('\n');
    const handle = await troupe.submit({ yaml, options: { stop_grace_s: 1 } });
    const final = await handle.wait();
    expect(final.status).toBe('FAILED');
    // The canaries did travel through Temporal: the log of job 0 is read through a workflow.
    const log = await handle.readLog(0);
    expect(log.data).toContain(printed);
    expect(log.data).toContain(envSecret);

    const ids: string[] = [];
    for await (const info of troupe.temporal.workflow.list()) ids.push(info.workflowId);
    expect(ids).toEqual(expect.arrayContaining([handle.workflowId, `${handle.workflowId}/group/talk`, `${handle.workflowId}/group/probe`]));
    expect(ids.length).toBeGreaterThanOrEqual(4);

    const stored = await showAll(ids, null);
    expect(stored).toContain('eventId');
    expect(stored).not.toContain(printed);
    expect(stored).not.toContain(envSecret);
    // Positive control: the same histories through the codec server hold both canaries.
    const decoded = await showAll(ids, codecUrl);
    expect(decoded).toContain(printed);
    expect(decoded).toContain(envSecret);
    // And so does the SDK's view with the key (the failure messages are decrypted too).
    const withKey = await historiesText(troupe.temporal, handle.workflowId, new EncryptionCodec(loadCodecKeyring({ create: false }), { unencrypted: 'pass' }));
    expect(withKey.text).toContain(printed);

    expect(databaseFiles().length).toBeGreaterThanOrEqual(1);
    expect(filesHolding(runName).length).toBeGreaterThanOrEqual(1);
    expect(filesHolding(printed)).toEqual([]);
    expect(filesHolding(envSecret)).toEqual([]);

    // Stopped, the server checkpoints its WAL into the database: search the files again.
    worker.shutdown();
    await running;
    await stopDevServer(opts);
    expect(existsSync(join(stateDir, 'temporal.db'))).toBe(true);
    expect(filesHolding(runName).length).toBeGreaterThanOrEqual(1);
    expect(filesHolding(printed)).toEqual([]);
    expect(filesHolding(envSecret)).toEqual([]);
  }, 240_000);
});
