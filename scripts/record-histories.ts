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
import { closeAllSshSessions } from '../src/backends/ssh';
import { SshBackend } from '../src/fleet/ssh-backend';
import { FleetClient } from '../src/fleet/fleet-client';
import { fleetSpecOf } from '../src/fleet/fleet-spec';
import { loadFleetConfig } from '../src/plan';
import { createTestHosts, jobDirOfTestHost, testHostsFleetYaml } from '../test/e2e/hosts';
import { SimulatedBackend } from '../src/backends/simulated/simulated-backend';
import { defaultDevServerOptions, projectRoot, startDevServer, stopDevServer } from '../src/devserver/dev-server';
import { createTroupeWorker } from '../src/worker/create-worker';
import { TroupeClient } from '../src/client';
import { failureConverterPath } from '../src/codec/data-converter';
import { fleetWorkflowId, nodeGroupWorkflowId, runWorkflowId } from '../src/contract/ids';
import { runStateQuery, stopRunSignal, type RunInputArg } from '../src/contract/messages';
import { makePlan, testHostSized } from '../test/helpers/plans';
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
// Real SSH hosts (network namespaces with their own sshd) for the fleet's histories: what
// test/e2e/ssh-fleet-fixtures.ts sets up, each host's jobs in a directory of its own.
const sshHosts = await createTestHosts(['h1', 'h2', 'h3'].map((name) => ({ name, skipBashrc: true })));
const fleets = new FleetClient(client, { taskQueue });
const ssh = new SshBackend({ fleets, releaseGraceSeconds: 1, jobBaseDir: jobDirOfTestHost(sshHosts) });
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
    ssh,
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
  // By run id: visibility may list one execution twice while its record is being closed.
  const runIds = new Set<string>();
  for await (const e of client.workflow.list({ query: `WorkflowId = "${workflowId}"` })) runIds.add(e.runId);
  const executions = runIds.size;
  if (executions > 1 && first) {
    save(`${stamp}-${name}-adopted.run.json`, workflowId, historyToJSON(await client.workflow.getHandle(workflowId).fetchHistory()));
    const childId = nodeGroupWorkflowId(workflowId, first.name, 0, executions - 1);
    save(`${stamp}-${name}-adopted.group.json`, childId, historyToJSON(await client.workflow.getHandle(childId).fetchHistory()));
  }
  console.log(`recorded ${name} (${executions} execution${executions === 1 ? '' : 's'})`);
}

/** A fleet of some of the SSH hosts, applied as `troupe fleet apply` does, through `through`. */
async function applyFleet(through: FleetClient, name: string, hostNames: string[]): Promise<void> {
  const yaml = testHostsFleetYaml(sshHosts, name, hostNames);
  const file = join(stateDir, `${name}.yml`);
  writeFileSync(file, yaml);
  const state = await through.apply(fleetSpecOf(loadFleetConfig(yaml, file, { environ: {} }), file));
  const notReady = state.hosts.filter((h) => h.status !== 'ready');
  if (notReady.length > 0) throw new Error(`fleet ${name}: ${notReady.map((h) => `${h.spec.target.hostname}: ${h.reason}`).join('; ')}`);
}

/** A fleet's executions, oldest first (a fleet that continued as new has several). */
async function fleetExecutions(name: string): Promise<Array<{ runId: string; startTime: Date }>> {
  const executions = new Map<string, Date>();
  for await (const e of client.workflow.list({ query: `WorkflowId = "${fleetWorkflowId(name)}"` })) executions.set(e.runId, e.startTime);
  return [...executions].map(([runId, startTime]) => ({ runId, startTime })).sort((a, b) => a.startTime.getTime() - b.startTime.getTime());
}

/** The fleet's first execution as `<scenario>.fleet.json`, and its last as `<scenario>-adopted.fleet.json` when it continued as new. */
async function saveFleet(scenario: string, name: string): Promise<number> {
  const executions = await fleetExecutions(name);
  const workflowId = fleetWorkflowId(name);
  const history = async (runId: string) => historyToJSON(await client.workflow.getHandle(workflowId, runId).fetchHistory());
  const [first, last] = [executions[0], executions.at(-1)];
  if (!first || !last) throw new Error(`fleet ${name}: no execution`);
  save(`${stamp}-${scenario}.fleet.json`, workflowId, await history(first.runId));
  if (last !== first) save(`${stamp}-${scenario}-adopted.fleet.json`, workflowId, await history(last.runId));
  console.log(`recorded ${scenario} (${executions.length} execution${executions.length === 1 ? '' : 's'})`);
  return executions.length;
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

  // A fleet's hosts change: two hosts probed, a third added, all probed again (re-detected), one removed, the fleet deleted.
  await applyFleet(fleets, 'rec-hosts', ['h1', 'h2']);
  await applyFleet(fleets, 'rec-hosts', ['h1', 'h2', 'h3']);
  await applyFleet(fleets, 'rec-hosts', ['h1', 'h2', 'h3']);
  await applyFleet(fleets, 'rec-hosts', ['h1', 'h3']);
  await fleets.delete('rec-hosts', { force: false });
  await client.workflow.getHandle(fleetWorkflowId('rec-hosts')).result();
  await saveFleet('fleet-hosts-changed', 'rec-hosts');

  // A run on an SSH fleet holds a host while the fleet continues as new (re-probed until its history
  // is long); the next execution takes the lease up and gets the host back at the run's teardown.
  const handingOver = new FleetClient(client, { taskQueue, continueAsNewAfterEvents: 20 });
  await applyFleet(handingOver, 'rec-lease', ['h1', 'h2']);
  await record('ssh-fleet-lease', { plan: makePlan('rec-ssh-lease', [{ name: 'g', nodes: 1, commands: ['sleep 60'], resources: testHostSized }], { fleets: ['rec-lease'] }), backend: 'ssh', options: { stop_grace_s: 1 } }, async (h) => {
    for (;;) {
      const s = await h.query(runStateQuery);
      if (s.jobs.every((j) => j.status === 'RUNNING')) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const before = (await fleetExecutions('rec-lease')).length;
    while ((await fleetExecutions('rec-lease')).length === before) await applyFleet(handingOver, 'rec-lease', ['h1', 'h2']);
    const held = (await fleets.state('rec-lease'))?.hosts.filter((host) => host.holder !== null).length;
    if (held !== 1) throw new Error(`fleet rec-lease: ${held} hosts held after its hand-over, not 1`);
    await h.signal(stopRunSignal, { abort: false });
  });
  const released = (await fleets.state('rec-lease'))?.hosts.every((host) => host.holder === null);
  if (!released) throw new Error('fleet rec-lease: a host is still held after the run ended');
  await fleets.delete('rec-lease', { force: false });
  await client.workflow.getHandle(fleetWorkflowId('rec-lease')).result();
  await saveFleet('fleet-lease-handover', 'rec-lease');
} finally {
  // Each step whatever the one before did: a recording that failed must not leave the dev server or the hosts behind.
  const steps: Array<[string, () => unknown]> = [
    ['worker', async () => {
      worker.shutdown();
      await running;
    }],
    ['connections', async () => Promise.all([workerConnection.close(), connection.close(), closeAllSshSessions()])],
    ['ssh hosts', async () => sshHosts.destroy()],
    ['dev server', async () => stopDevServer(serverOpts)],
    ['state', () => rmSync(stateDir, { recursive: true, force: true })],
  ];
  for (const [what, step] of steps) {
    try {
      await step();
    } catch (err) {
      console.error(`record-histories: stopping the ${what} failed: ${err instanceof Error ? err.message : String(err)}`);
      process.exitCode = 1;
    }
  }
}
