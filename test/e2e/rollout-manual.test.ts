import { randomBytes } from 'node:crypto';
import { WorkflowUpdateStage } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { runWorkflowId } from '../../src/contract/ids';
import { applyServiceUpdate, rolloutControlUpdate, runStateQuery } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import type { Plan } from '../../src/plan/plan-schema';
import { stopLeavingNothing } from '../helpers/leftovers';
import { mixed, standInPdServiceYaml, steadyLoad, useStandInGateway } from '../helpers/stand-in-service';
import { kill9, startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/**
 * `rollout.rollback: manual` on the local fleet behind a real gateway, under a steady load: a canary
 * whose decode fails a third of its answers fails its gate and is held for a decision instead of
 * rolled back — paused, given no new request, its replicas kept running. The worker is SIGKILLed
 * while it is held; the next one keeps it held. Rolled back by hand (the rolloutControl Update that
 * `troupe rollout rollback` and the SDK send): the apply's Update answers with both reasons, the old
 * revision serves and was never restarted, and only requests the canary took failed. Then a revision
 * whose decode is killed once READY: held too, not the service failed; reverted (the serving spec
 * applied again), which rolls it back.
 */

const RATE = 20;
const env = useWorkerProcesses('rollout-manual');
const { fleet, taskQueue, workers } = env;
const name = `man-${randomBytes(3).toString('hex')}`;
const standInGateway = useStandInGateway(env, name);

function service(label: string, decodeFlags = '', decode?: string): Plan {
  const yaml = standInPdServiceYaml({
    name,
    script: standInGateway.script,
    label,
    coherence: 'revision',
    decodeFlags,
    ...(decode ? { decode } : {}),
    rollout: ['  canary: {traffic: 30, soak: 8s}', '  rollback: manual'],
  });
  return serviceRunPlan(loadServicePlan(yaml, 'svc.yml', { environ: {} }), null);
}

const live = (s: RunState) => s.jobs.filter((j) => !j.removed);
const errorOf = (err: unknown) => (err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err));

describe('a rollout held for a decision (rollback: manual)', () => {
  it('holds a canary whose gate failed, keeps it held across a worker SIGKILL, and rolls it back by hand', async () => {
    workers.push(await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: standInGateway.workerEnv() }));
    const v1 = service('v1');
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan: v1, backend: 'local', options: { stop_grace_s: 1 } }] });
    const first = await waitForRunState(handle, (s) => live(s).length === 5 && live(s).every((j) => j.status === 'READY') && (s.service?.table_generation ?? 0) > 0, 120_000);
    const serving = live(first).map((j) => `${j.job_num}:${j.instance?.instance_id}`);

    const load = steadyLoad(() => `${standInGateway.gateway().url}/services/${name}/`, RATE);
    await new Promise((r) => setTimeout(r, 1000));
    const applied = await handle.startUpdate(applyServiceUpdate, { args: [{ plan: service('v2', ' --error-rate 0.34') }], waitForStage: WorkflowUpdateStage.ACCEPTED });
    const held = await waitForRunState(handle, (s) => s.service?.rollout?.held != null, 120_000);
    expect(held.service?.rollout).toMatchObject({ deployment: 1, phase: 'canary', paused: true, share_percent: null });
    expect(held.service?.rollout?.held).toMatch(/^the canary's gate failed: error rate \d+(\.\d)?% \(\d+ of \d+\) above 5% and the old revision's 0%$/);
    // Held: once the table without its share is on the gateway (pushed as it was held: 1.5 s is ample), it
    // takes no new request; its replicas run on, nothing moves.
    await new Promise((r) => setTimeout(r, 1500));
    const heldAt = load.failures.length;
    await new Promise((r) => setTimeout(r, 3000));
    const still = await handle.query(runStateQuery);
    expect(live(still).filter((j) => j.revision === 1).map((j) => j.status)).toEqual(['READY', 'READY', 'READY', 'READY', 'READY']);
    expect(still.service?.rollout).toMatchObject({ deployment: 1, phase: 'canary', paused: true });
    // (A request the canary took just before that table may still have been answering then.)
    expect(load.failures.length - heldAt).toBeLessThanOrEqual(1);

    // The worker SIGKILLed while it is held: the next one keeps it held.
    await kill9(workers.at(-1)!);
    workers.push(await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: standInGateway.workerEnv() }));
    await new Promise((r) => setTimeout(r, 2000));
    expect((await handle.query(runStateQuery)).service?.rollout).toMatchObject({ deployment: 1, phase: 'canary', paused: true });

    // Rolled back by hand: the apply answers with why, the old revision serves.
    const back = await handle.executeUpdate(rolloutControlUpdate, { args: [{ action: 'rollback' }] });
    expect(back.rollout).toMatchObject({ deployment: 1, phase: 'over' });
    const answer = await applied.result().then(() => 'answered', errorOf);
    expect(answer).toMatch(/^deployment 1 rolled back: the canary's gate failed: .*; rolled back by hand; revision 0 serves$/);
    await new Promise((r) => setTimeout(r, 1000));
    await load.stop();
    // Only the canary's answers failed (its decode's errors, passed on by its router as 5xx of revision 1).
    expect(load.failures.length).toBeGreaterThan(0);
    expect(load.failures.filter((f) => !/^Error: 5\d\d revision 1: /.test(f))).toEqual([]);
    expect(mixed(load.chains)).toEqual([]);
    const after = await waitForRunState(handle, (s) => live(s).length === 5);
    expect(live(after).map((j) => `${j.job_num}:${j.instance?.instance_id}`)).toEqual(serving);
    expect(after.jobs.every((j) => j.restarts === 0)).toBe(true);

    // A revision whose decode is killed 3 s after its /health answers (READY by then, probed every second;
    // the canary's 8 s soak not over): where the same failure of a serving replica would end the service
    // (on_failure: fail-run, the default), it holds the rollout.
    const killer = `(while ! python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/health', timeout=1)" 2>/dev/null; do sleep 0.3; done; sleep 3; kill -9 $$) &`;
    const crashing = await handle.startUpdate(applyServiceUpdate, { args: [{ plan: service('v3', '', killer) }], waitForStage: WorkflowUpdateStage.ACCEPTED });
    const crashed = await waitForRunState(handle, (s) => s.service?.rollout?.held != null, 120_000);
    expect(crashed.status).toBe('RUNNING');
    expect(crashed.service?.rollout?.held).toMatch(/^revision 2's job \d+ \(decode\/\d\) on local failed: /);
    // Reverted: the serving spec applied again is this rollout's rollback (the old revision still serves).
    const reverted = await handle.executeUpdate(applyServiceUpdate, { args: [{ plan: service('v1') }] });
    expect(reverted).toMatchObject({ deployment: 2, rolled: [] });
    expect(await crashing.result().then(() => 'answered', errorOf)).toMatch(
      /^deployment 2 rolled back: revision 2's job \d+ \(decode\/\d\) on local failed: .*; reverted by an apply of revision 0's spec; revision 0 serves$/,
    );
    const kept = await waitForRunState(handle, (s) => live(s).length === 5);
    expect(live(kept).map((j) => `${j.job_num}:${j.instance?.instance_id}`)).toEqual(serving);

    await stopLeavingNothing(handle, fleet.stateDir);
  }, 300_000);
});
