/**
 * Records the histories that test/workflow/replay.test.ts replays, so that a workflow change which
 * would break running executions fails CI. Run by hand (`npx tsx scripts/record-histories.ts`)
 * only when a change is deliberately versioned with patched(); commit the new files beside the old.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { NativeConnection } from '@temporalio/worker';
import { LocalBackend } from '../src/backends/local/local-backend';
import { SimulatedBackend } from '../src/backends/simulated/simulated-backend';
import { defaultDevServerOptions, projectRoot, startDevServer, stopDevServer } from '../src/devserver/dev-server';
import { createTroupeWorker } from '../src/worker/create-worker';
import { nodeGroupWorkflowId, runWorkflowId } from '../workflows/ids';
import { runStateQuery, stopRunSignal, type RunInputArg } from '../workflows/messages';
import { makePlan } from '../test/helpers/plans';

const outDir = join(projectRoot, 'test', 'histories');
/** `RECORD_TAG=batches` → `2026-12-02-batches-…`: files of a later recording on the same day sit beside the earlier ones. */
const stamp = [new Date().toISOString().slice(0, 10), process.env.RECORD_TAG].filter(Boolean).join('-');
const stateDir = mkdtempSync(join(tmpdir(), 'troupe-record-'));
const serverOpts = defaultDevServerOptions({ stateDir: join(stateDir, 'server'), port: 27233, uiPort: 28233, dbFile: null });
await startDevServer(serverOpts);
const connection = await Connection.connect({ address: '127.0.0.1:27233' });
const client = new Client({ connection });
const workerConnection = await NativeConnection.connect({ address: '127.0.0.1:27233' });
const taskQueue = 'record-histories';
const worker = await createTroupeWorker({
  connection: workerConnection,
  namespace: 'default',
  taskQueue,
  backends: {
    simulated: new SimulatedBackend({ groupProvisioning: false }),
    local: new LocalBackend({ stateDir: join(stateDir, 'local'), network: 'auto' }),
  },
});
const running = worker.run();

/** `{ workflow_id, history }`: replay needs the original id (child ids derive from it). */
function save(file: string, workflowId: string, historyJson: string): void {
  writeFileSync(join(outDir, file), `{"workflow_id":${JSON.stringify(workflowId)},"history":${historyJson}}\n`);
}

async function record(name: string, input: RunInputArg, during?: (h: Awaited<ReturnType<typeof client.workflow.start>>) => Promise<void>) {
  const workflowId = runWorkflowId(input.plan.run_name);
  const handle = await client.workflow.start('RunWorkflow', { taskQueue, workflowId, args: [input] });
  if (during) await during(handle);
  await handle.result();
  mkdirSync(outDir, { recursive: true });
  save(`${stamp}-${name}.run.json`, workflowId, historyToJSON(await handle.fetchHistory()));
  const first = input.plan.groups[1] ?? input.plan.groups[0];
  if (first) {
    const childId = nodeGroupWorkflowId(workflowId, first.name, 0);
    save(`${stamp}-${name}.group.json`, childId, historyToJSON(await client.workflow.getHandle(childId).fetchHistory()));
  }
  console.log(`recorded ${name}`);
}

const pd = (runName: string) => makePlan(runName, [
  { name: 'router', nodes: 1, commands: ['echo router ${{ groups[1].nodes[0].IP_ADDRESS }}'] },
  { name: 'prefill', nodes: 2, commands: ['echo prefill'] },
  { name: 'decode', nodes: 2, commands: ['echo decode'] },
], { startup_order: 'workers-first' });

try {
  // The seed's sample as written: one node per group.
  await record('pd-single-nodes', {
    plan: makePlan('rec-pd-single', [
      { name: 'router', nodes: 1, commands: ['echo router ${{ groups[1].nodes[0].IP_ADDRESS }}'] },
      { name: 'prefill', nodes: 1, commands: ['sleep 0.2'] },
      { name: 'decode', nodes: 1, commands: ['sleep 0.2'] },
    ], { startup_order: 'workers-first' }),
    backend: 'local',
    options: { stop_grace_s: 1 },
  });
  await record('pd-one-job-per-call', { plan: pd('rec-pd-simulated'), backend: 'simulated', options: {} });
  await record('pd-local-master-done', {
    plan: { ...pd('rec-pd-local'), stop_criteria: 'master-done', groups: pd('rec-pd-local').groups.map((g, i) => ({ ...g, commands: [i === 0 ? 'sleep 0.3' : 'sleep 30'] })), jobs: pd('rec-pd-local').jobs.map((j) => ({ ...j, commands: [j.job_num === 0 ? 'sleep 0.3' : 'sleep 30'] })) },
    backend: 'local',
    options: { stop_grace_s: 1 },
  });
  await record('retry-then-fail', {
    plan: makePlan('rec-retry', [{ name: 'g', nodes: 2, commands: ['exit 1'] }], { retry: { on_events: ['error'], duration_s: 3 } }),
    backend: 'local',
    options: { retry_backoff_s: 1 },
  });
  await record('stopped-by-user', { plan: makePlan('rec-stop', [{ name: 'g', nodes: 2, commands: ['sleep 60'] }]), backend: 'local', options: { stop_grace_s: 1 } }, async (h) => {
    for (;;) {
      const s = await h.query(runStateQuery);
      if (s.jobs.every((j) => j.status === 'RUNNING')) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    await h.signal(stopRunSignal, { abort: false });
  });
} finally {
  worker.shutdown();
  await running;
  await workerConnection.close();
  await connection.close();
  await stopDevServer(serverOpts);
  rmSync(stateDir, { recursive: true, force: true });
}
