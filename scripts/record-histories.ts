/**
 * Records the histories that test/workflow/replay.test.ts replays: one run per behaviour whose
 * command sequence replay must protect. Run by hand (`npx tsx scripts/record-histories.ts`).
 * Before the first release it replaces the set whenever the workflows change; from the first
 * tagged release a change to a workflow's command sequence is a patch, and the histories of the
 * runs it changes are recorded beside the old ones (README, Development).
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { NativeConnection } from '@temporalio/worker';
import { LocalBackend } from '../src/backends/local/local-backend';
import { SimulatedBackend } from '../src/backends/simulated/simulated-backend';
import { defaultDevServerOptions, projectRoot, startDevServer, stopDevServer } from '../src/devserver/dev-server';
import { createTroupeWorker } from '../src/worker/create-worker';
import { TroupeClient } from '../src/client';
import { failureConverterPath } from '../src/codec/data-converter';
import { nodeGroupWorkflowId, runWorkflowId } from '../workflows/ids';
import { runStateQuery, stopRunSignal, type RunInputArg } from '../workflows/messages';
import { makePlan } from '../test/helpers/plans';
import type { Plan } from '../src/plan/plan-schema';

const outDir = join(projectRoot, 'test', 'histories');
/** `RECORD_TAG=heal` → `2026-12-02-heal-…`: files of a later recording on the same day sit beside the earlier ones. */
const stamp = [new Date().toISOString().slice(0, 10), process.env.RECORD_TAG].filter(Boolean).join('-');
/** Another port than the dev server's default: recording must not disturb one already running. */
const port = Number(process.env.RECORD_PORT ?? 27233);
const stateDir = mkdtempSync(join(tmpdir(), 'troupe-record-'));
const serverOpts = defaultDevServerOptions({ stateDir: join(stateDir, 'server'), port, uiPort: port + 1000, dbFile: null });
await startDevServer(serverOpts);
const connection = await Connection.connect({ address: `127.0.0.1:${port}` });
const client = new Client({ connection });
const workerConnection = await NativeConnection.connect({ address: `127.0.0.1:${port}` });
const taskQueue = 'record-histories';
const worker = await createTroupeWorker({
  connection: workerConnection,
  namespace: 'default',
  taskQueue,
  // Without the payload codec: the saved histories replay in CI with no key.
  dataConverter: { failureConverterPath },
  backends: {
    simulated: new SimulatedBackend({ groupProvisioning: true }),
    'simulated-one-by-one': new SimulatedBackend({ groupProvisioning: false }),
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
  try {
    if (during) await during(handle);
  } catch (err) {
    // The run's jobs must not outlive a recording that went wrong.
    await handle.signal(stopRunSignal, { abort: true });
    await handle.result().catch(() => undefined);
    throw err;
  }
  await handle.result();
  mkdirSync(outDir, { recursive: true });
  save(`${stamp}-${name}.run.json`, workflowId, historyToJSON(await handle.fetchHistory()));
  const first = input.plan.groups[1] ?? input.plan.groups[0];
  if (first) {
    const childId = nodeGroupWorkflowId(workflowId, first.name, 0);
    save(`${stamp}-${name}.group.json`, childId, historyToJSON(await client.workflow.getHandle(childId).fetchHistory()));
  }
  // A run that continued as new: its last execution (which took up the running jobs) and that one's group child too.
  let executions = 0;
  for await (const _ of client.workflow.list({ query: `WorkflowId = "${workflowId}"` })) executions += 1;
  if (executions > 1 && first) {
    save(`${stamp}-${name}-adopted.run.json`, workflowId, historyToJSON(await client.workflow.getHandle(workflowId).fetchHistory()));
    const childId = nodeGroupWorkflowId(workflowId, first.name, 0, executions - 1);
    save(`${stamp}-${name}-adopted.group.json`, childId, historyToJSON(await client.workflow.getHandle(childId).fetchHistory()));
  }
  console.log(`recorded ${name} (${executions} execution${executions === 1 ? '' : 's'})`);
}

/** A resize through the SDK, which asks again while the run continues as new. */
async function scale(runName: string, nodes: number): Promise<void> {
  await new TroupeClient(client, { taskQueue }).run(runName).scaleGroup('decode', nodes);
}

const pd = (runName: string, overrides: Partial<Plan> = {}) => makePlan(runName, [
  { name: 'router', nodes: 1, commands: ['echo router ${{ groups[1].nodes[0].IP_ADDRESS }}'] },
  { name: 'prefill', nodes: 2, commands: ['sleep 0.2'] },
  { name: 'decode', nodes: 2, commands: ['sleep 0.2'] },
], overrides);

try {
  // Staged unlock with group provisioning (the local fleet provisions a group in one call), workers-first.
  await record('unlock-group-provisioning-workers-first', {
    plan: pd('rec-pd-local', { startup_order: 'workers-first' }),
    backend: 'local',
    options: { stop_grace_s: 1 },
  });
  // Staged unlock one job per call, master-first, master-done: the others are stopped by teardown.
  await record('unlock-one-by-one-master-first', {
    plan: pd('rec-pd-one-by-one', { startup_order: 'master-first', stop_criteria: 'master-done' }),
    backend: 'simulated-one-by-one',
    options: {},
  });
  // depends_on: decode waits for prefill, the router for decode.
  const chained = pd('rec-depends-on');
  await record('depends-on', {
    plan: { ...chained, groups: chained.groups.map((g) => ({ ...g, depends_on: g.index === 0 ? [2] : g.index === 2 ? [1] : [] })) },
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
  // A live run: decode/0 fails once and is replaced at its rank (restart-node), then decode grows
  // 1 → 2 and shrinks back through the scaleGroup Update, the router told by on_peers_change; its
  // history passes 100 events on the way, so it continues as new (run-handover.ts) at least once.
  // Under /var/tmp: an isolated node has a /tmp of its own.
  const marks = mkdtempSync(join('/var/tmp', 'troupe-record-marks-'));
  chmodSync(marks, 0o1777);
  const live = makePlan('rec-heal', [
    { name: 'router', nodes: 1, commands: ['sleep 60'] },
    { name: 'decode', nodes: 1, commands: [`[ -e ${marks}/$DSTACK_NODE_GROUP_NODE_RANK ] || { touch ${marks}/$DSTACK_NODE_GROUP_NODE_RANK; exit 3; }`, 'sleep 60'] },
  ]);
  const [router, decode] = live.groups;
  if (router && decode) {
    Object.assign(router, { depends_on: [1], on_peers_change: 'true' });
    Object.assign(decode, { nodes_range: { min: 1, max: 2 }, on_failure: { action: 'restart-node', max_restarts: 2, within_s: null } });
  }
  await record('heal-restart-resize', { plan: live, backend: 'local', options: { stop_grace_s: 1, continue_as_new_after_events: 100 } }, async (h) => {
    // Each decode rank fails once: a resize is taken once the state shows its replacement running.
    const replaced = async (job: number) => {
      for (;;) {
        const s = await h.query(runStateQuery);
        if (s.status === 'RUNNING' && s.jobs[job]?.attempt === 1 && s.jobs[job].status === 'RUNNING' && s.jobs[0]?.status === 'RUNNING') return;
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    await replaced(1);
    await scale(live.run_name, 2);
    await replaced(2);
    await scale(live.run_name, 1);
    await h.signal(stopRunSignal, { abort: false });
  });
  rmSync(marks, { recursive: true, force: true });
  // Large enough that the state is paged and the groups read the address book from the run.
  await record('large-paged', {
    plan: makePlan('rec-large', ['head', 'a', 'b', 'c'].map((name) => ({ name, nodes: 300 }))),
    backend: 'simulated',
    options: {},
  });
} finally {
  worker.shutdown();
  await running;
  await workerConnection.close();
  await connection.close();
  await stopDevServer(serverOpts);
  rmSync(stateDir, { recursive: true, force: true });
}
