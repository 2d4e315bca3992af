import type { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HeldRun } from '../../src/backends/backend';
import { LocalBackend } from '../../src/backends/local/local-backend';
import { TroupeClient } from '../../src/client';
import { runChainStatus, RunReaper, type ReapableBackend } from '../../src/worker/run-reaper';
import { runWorkflowId } from '../../src/contract/ids';
import { runStateQuery } from '../../src/contract/messages';
import { makeLocalFleet, makeSharedDir } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { testClient } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';

/**
 * The reaper's one question, against a real server: is the run whose first execution is X still
 * open? A run that continued as new is (its first execution closed CONTINUED_AS_NEW, its latest
 * runs): nothing of it is reaped. Once its latest execution is terminated it is closed, and a pass
 * releases what the local fleet holds of it. A run this namespace never knew is left alone.
 */

const fleet = makeLocalFleet('troupe-reaper-wf-');
const marks = makeSharedDir('troupe-reaper-marks-');
let client: Client;
let closeClient: () => Promise<void>;
let worker: Awaited<ReturnType<typeof startTroupeWorker>>;

beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
  worker = await startTroupeWorker({ local: fleet.backend });
});
afterAll(async () => {
  await worker?.stop();
  await closeClient?.();
  fleet.remove();
  marks.remove();
});

async function until<T>(what: string, probe: () => Promise<T | null | false>, timeoutMs = 90_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('the reaper and a run that continues as new', () => {
  it('leaves a continued run alone, reaps it once terminated, and never one it does not know', async () => {
    const name = `reap-can-${worker.taskQueue}`;
    const plan = makePlan(name, [
      { name: 'router', nodes: 1, commands: ['sleep 120'] },
      { name: 'decode', nodes: 1, commands: [`[ -e ${marks.dir}/$DSTACK_NODE_GROUP_NODE_RANK ] || { touch ${marks.dir}/$DSTACK_NODE_GROUP_NODE_RANK; exit 3; }`, 'sleep 120'] },
    ]);
    Object.assign(plan.groups[1]!, { nodes_range: { min: 1, max: 2 }, on_failure: { action: 'restart-node', max_restarts: 2, within_s: null } });
    const handle = await client.workflow.start('RunWorkflow', {
      taskQueue: worker.taskQueue,
      workflowId: runWorkflowId(name),
      args: [{ plan, backend: 'local', options: { stop_grace_s: 1, continue_as_new_after_events: 100 } }],
    });
    const firstRunId = handle.firstExecutionRunId;
    // decode/0 fails once and is replaced; then decode grows to 2 (its new node fails once too):
    // past 100 events the run continues as new at a quiet moment.
    await until('decode/0 replaced', async () => {
      const s = await client.workflow.getHandle(handle.workflowId).query(runStateQuery);
      return s.jobs[1]?.attempt === 1 && s.jobs[1].status === 'RUNNING';
    });
    await new TroupeClient(client, { taskQueue: worker.taskQueue }).run(name).scaleGroup('decode', 2);
    const latest = await until('the run to continue as new', async () => {
      const d = await client.workflow.getHandle(handle.workflowId).describe();
      return d.runId !== firstRunId && d.status.name === 'RUNNING' && d;
    });
    expect((await client.workflow.getHandle(handle.workflowId, firstRunId).describe()).status.name).toBe('CONTINUED_AS_NEW');
    expect(latest.raw.workflowExecutionInfo?.firstRunId).toBe(firstRunId);

    const logs: string[] = [];
    const unknown: HeldRun = { run_workflow_id: 'run/never-was', run_id: '00000000-0000-0000-0000-000000000000', submission: 0, holds: '1 node' };
    const released: HeldRun[] = [];
    const stranger: ReapableBackend = {
      heldRuns: async () => [unknown],
      releaseRun: async (run_id, submission) => void released.push({ ...unknown, run_id, submission }),
    };
    const reaper = new RunReaper({ client, backends: { local: fleet.backend, stranger }, log: (line) => logs.push(line) });

    expect(await runChainStatus(client, handle.workflowId, firstRunId)).toEqual({ kind: 'open' });
    expect(await runChainStatus(client, unknown.run_workflow_id, unknown.run_id)).toEqual({ kind: 'unknown' });
    const held = await fleet.backend.heldRuns();
    expect(held.map((h) => h.run_id)).toEqual([firstRunId]);
    expect(await reaper.reapOnce()).toEqual([]);
    // Still held (how many nodes may change meanwhile: decode's new node fails once and is replaced).
    expect((await fleet.backend.heldRuns()).map((h) => h.run_id)).toEqual([firstRunId]);
    expect(released).toEqual([]);

    await client.workflow.getHandle(handle.workflowId).terminate('test: terminated after a continue-as-new');
    expect(await runChainStatus(client, handle.workflowId, firstRunId)).toEqual({ kind: 'closed', as: 'TERMINATED' });
    // Two workers' reapers at once (two backends on one state directory): both release, idempotently.
    const other = new RunReaper({ client, backends: { local: new LocalBackend({ stateDir: fleet.stateDir, network: 'auto' }) }, log: (line) => logs.push(line) });
    const [reaped, reapedToo] = await Promise.all([reaper.reapOnce(), other.reapOnce()]);
    expect(reaped.map((r) => [r.backend, r.run.run_id, r.closedAs])).toEqual([['local', firstRunId, 'TERMINATED']]);
    expect(reapedToo.map((r) => [r.backend, r.run.run_id, r.closedAs])).toEqual([['local', firstRunId, 'TERMINATED']]);
    expect(await fleet.backend.heldRuns()).toEqual([]);
    expect(released).toEqual([]);
    expect(logs.join('\n')).toMatch(new RegExp(`reaper: run ${handle.workflowId} \\(submission 0\\) had closed \\(TERMINATED\\) without its teardown; released [1-9]\\d* nodes? on the local fleet`));
    expect(logs.join('\n')).not.toContain('could not release');
    // Idempotent: a second pass (another worker's) finds nothing left.
    expect(await reaper.reapOnce()).toEqual([]);
  }, 240_000);
});
