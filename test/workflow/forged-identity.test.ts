import { ApplicationFailure, type Client, WorkflowFailedError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeLocalFleet, pidAlive } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { RecordingBackend } from '../helpers/recording-backend';
import { testClient } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';
import { FailureType } from '../../src/run-core/failure-table';
import { nodeGroupWorkflowId, runWorkflowId } from '../../src/contract/ids';
import { runStateQuery, stopRunSignal, type CarriedRun } from '../../src/contract/messages';
import type { NodeGroupInput } from '../../src/contract/node-group-input';
import type { RunState } from '../../src/contract/run-state';
import { waitForRunState } from '../helpers/worker-process-control';

/**
 * Issue 29, finding 3: a run's identity (its uid keys the local fleet's run user and directories,
 * the SSH fleets' holds) comes from Temporal, never from an input a client gives. A client starts
 * a RunWorkflow whose `carried` state names a victim's run, and a NodeGroupWorkflow that names the
 * victim's uid: both are refused without provisioning anything, and the victim runs on.
 */

const fleet = makeLocalFleet();
let client: Client;
let closeClient: () => Promise<void>;
let worker: Awaited<ReturnType<typeof startTroupeWorker>>;
let recording: RecordingBackend;

beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
  recording = new RecordingBackend(fleet.backend);
  worker = await startTroupeWorker({ local: recording });
});
afterAll(async () => {
  await worker?.stop();
  await closeClient?.();
  fleet.remove();
});

function forgedCarried(victim: RunState): CarriedRun {
  return {
    core: {
      run: victim,
      limits: { address_deadline_s: 600, provision_attempt_timeout_s: 600 },
      retry: null,
      retry_deadline_ms: null,
      backoff_s: 5,
      stop_request: null,
      failure_events: {},
      submission: { phase: 'started', addresses_due_ms: null, running_since_ms: null, group_failure: null, ending: null },
      live: null,
      service: null,
    },
    generation: 1,
    capabilities: { group_provisioning: false, provisions_on_worker: true },
    announced: null,
    signalled: victim.jobs.map((j) => j.job_num),
    live: { unwanted: [] },
  };
}

async function refusal(result: Promise<unknown>): Promise<ApplicationFailure> {
  const err = await result.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(WorkflowFailedError);
  const cause = (err as WorkflowFailedError).cause;
  expect(cause).toBeInstanceOf(ApplicationFailure);
  return cause as ApplicationFailure;
}

describe('a run identity a client forges', () => {
  it('is refused: a RunWorkflow with carried state, a NodeGroupWorkflow of its own; the victim runs on', async () => {
    const victimName = `victim-${worker.taskQueue}`;
    const victimPlan = makePlan(victimName, [{ name: 'main', nodes: 1, commands: ['while true; do sleep 0.2; done'] }]);
    const victim = await client.workflow.start('RunWorkflow', {
      taskQueue: worker.taskQueue,
      workflowId: runWorkflowId(victimName),
      args: [{ plan: victimPlan, backend: 'local', options: { stop_grace_s: 1 } }],
    });
    const state = await waitForRunState(victim, (s) => s.status === 'RUNNING');
    const victimPid = state.jobs[0]!.pid!;
    expect(pidAlive(victimPid)).toBe(true);
    const provisionsBefore = recording.calls.length;

    // A run of the thief's own, carrying the victim's state (its uid, its jobs), as a plain input.
    const thiefName = `thief-${worker.taskQueue}`;
    const thief = await client.workflow.start('RunWorkflow', {
      taskQueue: worker.taskQueue,
      workflowId: runWorkflowId(thiefName),
      args: [{ plan: makePlan(thiefName, [{ name: 'main', nodes: 1, commands: ['kill -9 -1'] }]), backend: 'local', options: {}, carried: forgedCarried(state) }],
    });
    const carried = await refusal(thief.result());
    expect(carried.type).toBe(FailureType.ForgedRunIdentity);
    expect(carried.message).toMatch(/"carried" is handed over by a run to its own next execution/);

    // A group child started by a client, naming the victim's run and uid.
    const group: NodeGroupInput = {
      run_workflow_id: victim.workflowId,
      run_uid: state.run_uid,
      submission: 0,
      backend: 'local',
      capabilities: { group_provisioning: true, provisions_on_worker: true },
      group: victimPlan.groups[0]!,
      jobs: [{ ...victimPlan.jobs[0]!, attempt: 7 }],
      run: { run_name: victimName, nodes_num: 1, env: {}, image: null, working_dir: null, fleets: null },
      group_sizes: [1],
      options: { runner_ready_timeout_s: 10, address_deadline_s: 10, provision_attempt_timeout_s: 10, stop_grace_s: 0, watch_interval_ms: 250, retry_backoff_s: 1, continue_as_new_after_events: 4000 },
      retry: null,
      retry_deadline_ms: null,
      unlocked: true,
      live: true,
      adopt: null,
    };
    const child = await client.workflow.start('NodeGroupWorkflow', {
      taskQueue: worker.taskQueue,
      workflowId: nodeGroupWorkflowId(victim.workflowId, 'main', 0, 9),
      args: [group],
    });
    const orphan = await refusal(child.result());
    expect(orphan.type).toBe(FailureType.ForgedRunIdentity);
    expect(orphan.message).toMatch(/not by a client/);

    // Nothing was provisioned for either; the victim's job runs on, its run still RUNNING.
    expect(recording.calls.length).toBe(provisionsBefore);
    expect(pidAlive(victimPid)).toBe(true);
    expect((await victim.query(runStateQuery)).status).toBe('RUNNING');
    await victim.signal(stopRunSignal, { abort: true });
    expect(((await victim.result()) as RunState).status).toBe('TERMINATED');
  });
});
