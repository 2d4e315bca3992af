import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { NativeConnection, type Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedBackend } from '../../src/backends/simulated/simulated-backend';
import { NoBackendError, TroupeClient } from '../../src/client';
import { backendOffered } from '../../src/client/worker-presence';
import { createTroupeWorker } from '../../src/worker/create-worker';
import { temporalAddress, testClient, uniqueTaskQueue } from '../helpers/temporal';
import { troupeWorkflowBundle } from '../helpers/troupe-worker';

/**
 * Where no worker drives the local fleet (the compose deployment's workers drive SSH fleets only),
 * a run without a fleet is refused when it is submitted, by the SDK and by `troupe apply`, instead
 * of starting and failing on a worker that cannot place it.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const taskQueue = uniqueTaskQueue('no-local');
let connection: NativeConnection;
let worker: Worker;
let running: Promise<void>;
let client: Awaited<ReturnType<typeof testClient>>;

beforeAll(async () => {
  connection = await NativeConnection.connect({ address: temporalAddress() });
  worker = await createTroupeWorker({
    connection,
    namespace: 'default',
    taskQueue,
    backends: { simulated: new SimulatedBackend({ groupProvisioning: true }) },
    workflowBundle: await troupeWorkflowBundle(),
  });
  running = worker.run();
  client = await testClient();
});
afterAll(async () => {
  worker?.shutdown();
  await running;
  await connection?.close();
  await client?.close();
});

const yaml = 'type: task\nname: no-fleet\ncommands: [echo hi]\n';

describe('a run without a fleet where no worker has the local fleet', () => {
  it('decides from the pollers: only workers that name their backends can say no', () => {
    expect(backendOffered(['1@a backends=ssh', '2@b backends=ssh'], 'local')).toEqual({ offered: false, known: ['ssh'] });
    expect(backendOffered(['1@a backends=local,ssh'], 'local').offered).toBe(true);
    expect(backendOffered(['1@a backends=ssh', 'someone-else'], 'local').offered).toBe(true);
  });

  it('is refused by the SDK, naming the backends the workers drive and what to do', async () => {
    const troupe = new TroupeClient(client.client, { taskQueue });
    const refused = troupe.submit({ yaml });
    await expect(refused).rejects.toBeInstanceOf(NoBackendError);
    await expect(troupe.submit({ yaml })).rejects.toThrow(/drives backend "local" \(they drive: simulated\).*Give the run a fleet \(--fleet NAME/);
  });

  it('is refused by `troupe apply` before anything starts (exit 1, one line)', () => {
    const run = spawnSync(process.execPath, ['bin/troupe.js', 'apply', '-f', 'examples/pd-disagg-local.yml', '-y', '-d'], {
      cwd: root,
      env: { ...process.env, NO_COLOR: '1', TEMPORAL_ADDRESS: temporalAddress(), TROUPE_TASK_QUEUE: taskQueue },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(run.status, run.stderr).toBe(1);
    expect(run.stderr.trim().split('\n')).toHaveLength(1);
    expect(run.stderr).toMatch(/^no Troupe worker on task queue "no-local-[^"]+" drives backend "local" \(they drive: simulated\)/);
  });
});
