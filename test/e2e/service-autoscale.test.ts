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
 * scale_down_delay: 5s}` under an open-loop load stepped from 10 to 60 requests a second. decode is
 * sized on the service's traffic through its router (the gateways' figures, read every 2 s): it grows
 * to 3 while the load is high — the new replicas answering — and, once the load is gone, back to 1
 * after its scale_down_delay, drained. Not one request fails.
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
      decodeScaling: '{metric: rps, target: 20, window: 30s, scale_up_delay: 0s, scale_down_delay: 5s}',
    });
    const plan = serviceRunPlan(loadServicePlan(yaml, 'svc.yml', { environ: {} }), null);
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }] });
    await waitForRunState(handle, (s) => live(s).length === 4 && live(s).every((j) => j.status === 'READY') && (s.service?.table_generation ?? 0) > 0, 120_000);

    // 10 rps: one decode is enough (20 per replica).
    let rate = 10;
    const load = openLoad(() => rate);
    await new Promise((r) => setTimeout(r, 6000));
    expect(decodes(await handle.query(runStateQuery))).toHaveLength(1);
    // 60 rps: the 30 s average passes 40 (3 wanted) ~18 s after the step.
    rate = 60;
    const stepAt = Date.now();
    const grown = await waitForRunState(handle, (s) => decodes(s).length === 3 && decodes(s).every((j) => j.status === 'READY'), 60_000);
    const grownAt = Date.now();
    expect(grownAt - stepAt).toBeLessThan(30_000 + 2_000 + 10_000);
    const added = decodes(grown).map((j) => j.group_job_index);
    // The Web UI's current details say why: the autoscaler's last verdict for decode.
    const meta = (await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '';
    expect(meta).toMatch(/\*\*Autoscaling\*\*\n- decode: [\d.]+ rps \(target 20 per replica\) → 3 wanted/);
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
