import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { runWorkflowId } from '../../src/contract/ids';
import { runStateQuery } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { stopLeavingNothing } from '../helpers/leftovers';
import { chatThrough, standInPdServiceYaml, useStandInGateway } from '../helpers/stand-in-service';
import { startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/**
 * The autoscaler on the local fleet behind a real gateway: the stand-in PD service with decode
 * `replicas: 1..3, scaling: {metric: rps, target: 20, window: 30s, scale_up_delay: 0s,
 * scale_down_delay: 5s, replica_metrics: {port: 8000, requests: stand_in_chat_completions_total}}`
 * under an open-loop load stepped from 10 to 60 chat completions a second. decode is sized on its OWN
 * traffic (Troupe's `replica_metrics`: its replicas' counters, read every 2 s), not the service's:
 * 50 more requests a second that the router answers itself (`GET /v1/models`) leave it at 1, where
 * dstack's rule (the service's traffic) would want 2. It grows to 3 while the completions are many —
 * the new replicas answering — and, once the load is gone, back to 1 after its scale_down_delay,
 * drained. Not one request fails.
 */

const env = useWorkerProcesses('autoscale');
const { fleet, taskQueue, workers } = env;
const name = `auto-${randomBytes(3).toString('hex')}`;
const standInGateway = useStandInGateway(env, name);
const standIn = standInGateway.script;
const gatewayUrl = () => standInGateway.gateway().url;


/** An open loop at `rate()` requests a second until stopped: failures kept, and which decode replica answered each. */
function openLoad(rate: () => number) {
  const failures: string[] = [];
  const decodes: Array<{ at: number; replica: number }> = [];
  const inFlight = new Set<Promise<void>>();
  let stopped = false;
  const one = async () => {
    try {
      const mark = await chatThrough(`${gatewayUrl()}/services/${name}/`);
      decodes.push({ at: Date.now(), replica: mark.decode.replica });
    } catch (err) {
      failures.push(String(err));
    }
  };
  const tick = () => {
    if (stopped) return;
    const p = one().finally(() => inFlight.delete(p));
    inFlight.add(p);
    setTimeout(tick, 1000 / rate());
  };
  tick();
  return {
    failures,
    decodes,
    async stop() {
      stopped = true;
      await Promise.all([...inFlight]);
    },
  };
}

/** `rate` GET /v1/models a second through the gateway, which the router answers itself (no decode sees them). */
function modelsLoad(rate: number) {
  const failures: string[] = [];
  const inFlight = new Set<Promise<void>>();
  let answered = 0;
  const timer = setInterval(() => {
    const p = fetch(`${gatewayUrl()}/services/${name}/v1/models`, { signal: AbortSignal.timeout(20_000) })
      .then(async (res) => {
        await res.arrayBuffer();
        if (res.status === 200) answered += 1;
        else failures.push(`GET /v1/models: HTTP ${res.status}`);
      })
      .catch((err: unknown) => void failures.push(String(err)))
      .finally(() => inFlight.delete(p));
    inFlight.add(p);
  }, 1000 / rate);
  return {
    failures,
    get answered() {
      return answered;
    },
    async stop() {
      clearInterval(timer);
      await Promise.all([...inFlight]);
    },
  };
}

const live = (s: RunState) => s.jobs.filter((j) => !j.removed);
const decodes = (s: RunState) => live(s).filter((j) => j.group_name === 'decode');

describe('a service that sizes itself', () => {
  it('grows decode under a load step from 10 to 60 rps and shrinks it once the load is gone, with 0 failed', async () => {
    workers.push(await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: standInGateway.workerEnv() }));
    const yaml = standInPdServiceYaml({
      name,
      script: standIn,
      label: 'v1',
      coherence: 'revision',
      decodeReplicas: '1..3',
      decodeScaling: '{metric: rps, target: 20, window: 30s, scale_up_delay: 0s, scale_down_delay: 5s, replica_metrics: {port: 8000, requests: stand_in_chat_completions_total}}',
    });
    const plan = serviceRunPlan(loadServicePlan(yaml, 'svc.yml', { environ: {} }), null);
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }] });
    await waitForRunState(handle, (s) => live(s).length === 4 && live(s).every((j) => j.status === 'READY') && (s.service?.table_generation ?? 0) > 0, 120_000);

    // 10 completions a second: one decode is enough (20 per replica), though 50 GET /v1/models a
    // second go through the router too: 60 rps over the service, 32 on average over its 30 s window
    // after 16 s (2 decodes by dstack's rule).
    let rate = 10;
    const load = openLoad(() => rate);
    const models = modelsLoad(50);
    await new Promise((r) => setTimeout(r, 16_000));
    await models.stop();
    const low = await handle.query(runStateQuery);
    expect(decodes(low)).toHaveLength(1);
    expect(models.failures.slice(0, 5)).toEqual([]);
    expect(models.answered).toBeGreaterThan(600);
    // 60 rps: the 30 s average passes 40 (3 wanted) ~18 s after the step.
    rate = 60;
    const stepAt = Date.now();
    const grown = await waitForRunState(handle, (s) => decodes(s).length === 3 && decodes(s).every((j) => j.status === 'READY'), 60_000);
    const grownAt = Date.now();
    expect(grownAt - stepAt).toBeLessThan(30_000 + 2_000 + 10_000);
    const added = decodes(grown).map((j) => j.group_job_index);
    // The Web UI's current details say why: the autoscaler's last verdict for decode.
    const meta = (await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '';
    expect(meta).toMatch(/\*\*Autoscaling\*\*\n- decode: [\d.]+ rps, its replicas' own \(target 20 per replica\) → 3 wanted/);
    await new Promise((r) => setTimeout(r, 3000));
    // The new decodes answer.
    expect(new Set(load.decodes.filter((d) => d.at > grownAt).map((d) => d.replica))).toEqual(new Set(added));
    // The load gone: back to one decode, drained.
    rate = 0.5;
    await waitForRunState(handle, (s) => decodes(s).length === 1, 90_000);
    await load.stop();
    expect(load.failures.slice(0, 5)).toEqual([]);
    const state = await handle.query(runStateQuery);
    expect(state.jobs.every((j) => j.restarts === 0)).toBe(true);

    await stopLeavingNothing(handle, fleet.stateDir);
  }, 300_000);
});
