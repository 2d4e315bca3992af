import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { runWorkflowId } from '../../src/contract/ids';
import { WorkflowUpdateStage } from '@temporalio/client';
import { applyServiceUpdate, rolloutControlUpdate, runStateQuery, scaleGroupUpdate, stopRunSignal } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import type { Plan } from '../../src/plan/plan-schema';
import { leftovers } from '../helpers/leftovers';
import { mixed, standInPdServiceYaml, steadyLoad as steadyLoadTo, useStandInGateway } from '../helpers/stand-in-service';
import { kill9, startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/**
 * A coherent rollout (`rollout.coherence: revision`) of the prefill/decode stand-in service on the
 * local fleet, behind a real gateway, under a steady load: the new revision starts whole beside the
 * old one, the traffic moves in one table, the old one is drained and stopped. Not one request
 * fails and no answer's chain mixes revisions (router, prefill and decode each say theirs). A
 * revision whose decode cannot start is rolled back: the old one serves throughout, never restarted.
 * A canary whose decode fails a fifth of its answers fails its gate and is rolled back: only requests
 * it took fail — the worker SIGKILLed while it rolls back, the next one finishing the rollback. The
 * worker SIGKILLed mid-rollout: the next one carries it on, nothing fails. Steered
 * by hand: paused while it starts and resumed, then rolled back to the spec it replaced.
 */

const RATE = 25;
const env = useWorkerProcesses('coherent-rollout');
const { fleet, taskQueue, workers } = env;
const name = `coh-${randomBytes(3).toString('hex')}`;
const standInGateway = useStandInGateway(env, name);
const standIn = standInGateway.script;
const steadyLoad = () => steadyLoadTo(() => `${standInGateway.gateway().url}/services/${name}/`, RATE);

/**
 * The service; `more`: a command before decode's stand-in, its flags, `rollout:` lines. Its router is
 * READY by `/health` (its own `ready`), which answers whatever its peers do: what gate A is for.
 */
function service(label: string, more: Partial<Parameters<typeof standInPdServiceYaml>[0]> = {}): Plan {
  const yaml = standInPdServiceYaml({ name, script: standIn, label, coherence: 'revision', routerReadyHealth: true, ...more });
  return serviceRunPlan(loadServicePlan(yaml, 'svc.yml', { environ: {} }), null);
}


const live = (s: RunState) => s.jobs.filter((j) => !j.removed);

describe('a coherent rollout of a running service', () => {
  it('moves every group to the new revision under load with 0 failed and 0 mixed chains; a revision that cannot start is rolled back', async () => {
    workers.push(await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: standInGateway.workerEnv() }));
    const v1 = service('v1');
    // In two rounds (rollout.steps): half of each group's new replicas take half the traffic before half the old go.
    const v2 = service('v2', { rollout: ['  steps: 2'] });
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan: v1, backend: 'local', options: { stop_grace_s: 1 } }] });
    const first = await waitForRunState(handle, (s) => live(s).length === 5 && live(s).every((j) => j.status === 'READY') && (s.service?.table_generation ?? 0) > 0, 120_000);
    // Machines, not ranks: a later round's new replica takes a rank an earlier round gave up.
    const oldMachines = live(first).map((j) => j.instance?.instance_id);

    // The rollout, under load.
    let load = steadyLoad();
    await new Promise((r) => setTimeout(r, 2000));
    const rounds: unknown[] = [];
    const gateNotes = new Set<string>();
    const watching = setInterval(() => {
      void handle.query(runStateQuery).then((s) => {
        const r = s.service?.rollout;
        if (r && r.phase !== 'over') rounds.push({ round: r.round, phase: r.phase, share_percent: r.share_percent });
        if (r?.synthetic) gateNotes.add(r.synthetic);
      }, () => undefined);
    }, 100);
    const result = await handle.executeUpdate(applyServiceUpdate, { args: [{ plan: v2 }] }).finally(() => clearInterval(watching));
    await new Promise((r) => setTimeout(r, 2000));
    await load.stop();
    expect(result).toEqual({ deployment: 1, rolled: ['router', 'prefill', 'decode'], groups: [{ name: 'router', replicas: 1 }, { name: 'prefill', replicas: 2 }, { name: 'decode', replicas: 2 }] });
    expect(load.failures.slice(0, 5)).toEqual([]);
    expect(load.chains.length).toBeGreaterThan(100);
    expect(mixed(load.chains)).toEqual([]);
    // Its first round shown as it went: a share of new requests on the new revision while the old one was
    // current. (Polled every 100 ms: with no soak its `canary` phase can pass between two polls — a fresh
    // clone's CI saw only `retiring` with the share —, so the share is looked for, and the phase in the steps below.)
    expect(rounds).toContainEqual(expect.objectContaining({ round: { number: 1, of: 2 }, share_percent: 50 }));
    // Gate A's request went through the gateway too (the path users take), not only from the worker.
    expect([...gateNotes].join('\n')).toMatch(/passed on 1 entry replica \(slowest \d+ ms\), and through 1 gateway/);
    // The Web UI's current details list the rollout's steps as they went.
    const details = (await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '';
    expect(details).toMatch(/- \d\d:\d\d:\d\d deployment 1 round 1 of 2: canary, new revision at 50%\n(.|\n)*- \d\d:\d\d:\d\d deployment 1 round 2 of 2: starting/);
    const hash1 = v1.service?.revision;
    const hash2 = v2.service?.revision;
    expect(new Set(load.chains.map((c) => c.router))).toEqual(new Set([hash1, hash2]));
    // Once answered, only the new revision serves; the old replicas were drained and removed, none restarted.
    const after: RunState = await waitForRunState(handle, (s) => s.service?.deployment === 1);
    expect(live(after).map((j) => j.status)).toEqual(['READY', 'READY', 'READY', 'READY', 'READY']);
    expect(live(after).some((j) => oldMachines.includes(j.instance?.instance_id))).toBe(false);
    expect(live(after).map((j) => j.revision)).toEqual([1, 1, 1, 1, 1]);
    expect(after.jobs.every((j) => j.restarts === 0)).toBe(true);

    // A revision whose decode cannot start: rolled back, the serving one untouched.
    const serving = live(after).map((j) => `${j.job_num}:${j.instance?.instance_id}`);
    load = steadyLoad();
    await new Promise((r) => setTimeout(r, 1000));
    const refused = await handle.executeUpdate(applyServiceUpdate, { args: [{ plan: service('v3', { decode: 'exit 1' }) }] }).then(
      () => 'answered',
      (err: unknown) => (err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err)),
    );
    expect(refused).toMatch(/^deployment 2 rolled back: decode\/\d+ \(job \d+\) did not start: .*; revision 1 serves$/);
    await new Promise((r) => setTimeout(r, 1000));
    await load.stop();
    expect(load.failures.slice(0, 5)).toEqual([]);
    expect(mixed(load.chains)).toEqual([]);
    expect(new Set(load.chains.map((c) => c.router))).toEqual(new Set([hash2]));
    const back: RunState = await waitForRunState(handle, (s) => live(s).length === 5 && live(s).every((j) => j.status === 'READY'));
    expect(live(back).map((j) => `${j.job_num}:${j.instance?.instance_id}`)).toEqual(serving);
    expect(back.jobs.every((j) => j.restarts === 0)).toBe(true);

    // A canary whose decode fails a fifth of its answers: its gate fails, all traffic goes back, it is stopped;
    // only requests the canary took failed.
    load = steadyLoad();
    await new Promise((r) => setTimeout(r, 1000));
    const gating = handle
      .executeUpdate(applyServiceUpdate, { args: [{ plan: service('v4', { decodeFlags: ' --error-rate 0.2', rollout: ['  canary: {traffic: 20, soak: 10s}'] }) }] })
      .then(
        () => 'answered',
        (err: unknown) => (err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err)),
      );
    // The worker SIGKILLed while the canary rolls back: the next one finishes the rollback.
    await waitForRunState(handle, (s) => s.service?.rollout?.phase === 'rolling-back');
    await kill9(workers.at(-1)!);
    workers.push(await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: standInGateway.workerEnv() }));
    const gated = await gating;
    expect(gated).toMatch(/^deployment 3 rolled back: the canary's gate failed: error rate \d+(\.\d)?% \(\d+ of \d+\) above 5% and the old revision's 0%; revision 1 serves$/);
    await new Promise((r) => setTimeout(r, 2000));
    await load.stop();
    expect(load.failures.length).toBeGreaterThan(0);
    // The canary's decode fails; its router answers 502 for it: each one an answer of revision 3.
    expect(load.failures.filter((f) => !/^Error: 5\d\d revision 3: /.test(f))).toEqual([]);
    expect(mixed(load.chains)).toEqual([]);
    const canaryState: RunState = await waitForRunState(handle, (s) => live(s).length === 5);
    expect(live(canaryState).map((j) => `${j.job_num}:${j.instance?.instance_id}`)).toEqual(serving);
    expect(canaryState.service?.rollout).toMatchObject({ deployment: 3, phase: 'over', canary: { traffic_percent: 20 } });

    // The worker SIGKILLed while a good revision starts: the next one carries the rollout on, nothing fails or starts twice.
    load = steadyLoad();
    const v5 = service('v5');
    const rolling = handle.executeUpdate(applyServiceUpdate, { args: [{ plan: v5 }] });
    await waitForRunState(handle, (s) => s.jobs.filter((j) => !j.removed && j.status === 'READY').length >= 6);
    await kill9(workers.at(-1)!);
    workers.push(await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: standInGateway.workerEnv() }));
    expect(await rolling).toMatchObject({ deployment: 4 });
    await new Promise((r) => setTimeout(r, 1000));
    await load.stop();
    expect(load.failures.slice(0, 5)).toEqual([]);
    expect(mixed(load.chains)).toEqual([]);
    const rolled: RunState = await waitForRunState(handle, (s) => s.service?.deployment === 4 && live(s).length === 5);
    // No replica restarted, and no machine given twice: every attempt of every rank had one of its own.
    expect(rolled.jobs.every((j) => j.restarts === 0)).toBe(true);
    const machines = rolled.jobs.flatMap((j) => [j.instance, ...j.previous_attempts.map((a) => a.instance)].flatMap((i) => (i ? [i.instance_id] : [])));
    expect(machines.length).toBeGreaterThan(5);
    expect(new Set(machines).size).toBe(machines.length);
    expect(new Set(load.chains.map((c) => c.router))).toEqual(new Set([hash2, v5.service?.revision]));

    // By hand: a rollout paused while it starts (no next step), decode scaled 2 → 3 meanwhile (the new
    // revision's target), resumed; then, once it went through, rolled back to the spec it replaced as the
    // next deployment (decode back to its fixed 2) — all under load, nothing failed.
    load = steadyLoad();
    const v5Decodes = live(await handle.query(runStateQuery)).flatMap((j) => (j.group_name === 'decode' ? [j.job_num] : []));
    const v6 = service('v6', { decodeReplicas: '2..3' });
    const resumable = handle.executeUpdate(applyServiceUpdate, { args: [{ plan: v6 }] });
    await waitForRunState(handle, (s) => s.service?.rollout?.deployment === 5 && s.service.rollout.phase === 'starting');
    const paused = await handle.executeUpdate(rolloutControlUpdate, { args: [{ action: 'pause' }] });
    expect(paused.rollout).toMatchObject({ deployment: 5, paused: true });
    const scaling = await handle.startUpdate(scaleGroupUpdate, { args: [{ group: 'decode', nodes: 3 }], waitForStage: WorkflowUpdateStage.ACCEPTED });
    await new Promise((r) => setTimeout(r, 3000));
    expect((await handle.query(runStateQuery)).service?.rollout).toMatchObject({ deployment: 5, phase: 'starting', paused: true });
    const resumed = await handle.executeUpdate(rolloutControlUpdate, { args: [{ action: 'resume' }] });
    expect(resumed.rollout?.paused).toBe(false);
    expect(await resumable).toMatchObject({ deployment: 5, groups: [{ name: 'router', replicas: 1 }, { name: 'prefill', replicas: 2 }, { name: 'decode', replicas: 3 }] });
    expect(await scaling.result()).toMatchObject({ group: 'decode', nodes: 3, deployment: 5 });
    // Three decodes, none of them one that served before deployment 5.
    const v6Decodes = live(await handle.query(runStateQuery)).filter((j) => j.group_name === 'decode');
    expect(v6Decodes.map((j) => j.status)).toEqual(['READY', 'READY', 'READY']);
    expect(v6Decodes.filter((j) => v5Decodes.includes(j.job_num))).toEqual([]);
    const undone = await handle.executeUpdate(rolloutControlUpdate, { args: [{ action: 'rollback' }] });
    expect(undone.rollout).toMatchObject({ deployment: 6, phase: 'over', error: null, can_roll_back: true });
    expect(live(await handle.query(runStateQuery)).filter((j) => j.group_name === 'decode')).toHaveLength(2);
    await new Promise((r) => setTimeout(r, 1000));
    await load.stop();
    expect(load.failures.slice(0, 5)).toEqual([]);
    expect(mixed(load.chains)).toEqual([]);
    const last = load.chains.slice(-10).map((c) => c.router);
    expect(new Set(last)).toEqual(new Set([v5.service?.revision]));

    // A revision whose router is READY by its own probe (/health) but cannot reach its decodes: gate A's
    // synthetic request through it fails, so it is rolled back before it takes a single request.
    load = steadyLoad();
    await new Promise((r) => setTimeout(r, 1000));
    const unreachable = await handle.executeUpdate(applyServiceUpdate, { args: [{ plan: service('v7', { routerFlags: ' --decode-group nowhere' }) }] }).then(
      () => 'answered',
      (err: unknown) => (err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err)),
    );
    expect(unreachable).toMatch(/^deployment 7 rolled back: gate A failed: POST \/v1\/chat\/completions to http:\/\/[\d.]+:8000: HTTP 503 after \d+ ms; revision \d+ serves$/);
    expect((await handle.query(runStateQuery)).service?.rollout?.synthetic).toMatch(/^round 1: failed: POST \/v1\/chat\/completions/);
    await new Promise((r) => setTimeout(r, 1000));
    await load.stop();
    expect(load.failures.slice(0, 5)).toEqual([]);
    expect(new Set(load.chains.map((c) => c.router))).toEqual(new Set([v5.service?.revision]));

    await handle.signal(stopRunSignal, { abort: false });
    const final: RunState = await handle.result();
    expect(final.status).toBe('TERMINATED');
    expect(leftovers(final, fleet.stateDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
  }, 400_000);
});
