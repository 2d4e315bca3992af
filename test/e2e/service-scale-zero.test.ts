import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { runWorkflowId } from '../../src/contract/ids';
import { runStateQuery } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { stopLeavingNothing } from '../helpers/leftovers';
import { chatThrough, standInZeroServiceYaml, useStandInGateway } from '../helpers/stand-in-service';
import { startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/**
 * A service that scales to zero, on the local fleet behind a real gateway: one group of the stand-in
 * model server, `replicas: 0..2` with `scaling: {metric: rps, target: 10, window: 30s,
 * scale_down_delay: 5s}`. It starts with no replica; the gateway holds the first requests (none
 * answered 503) while the autoscaler, woken by them, starts one; once no request came for the window
 * and the delay, it goes back to zero, drained; and a request then wakes it again. Nothing is left
 * after the stop.
 */

const env = useWorkerProcesses('scale-zero');
const { fleet, taskQueue, workers } = env;
const name = `zero-${randomBytes(3).toString('hex')}`;
const standInGateway = useStandInGateway(env, name);
const gatewayUrl = () => standInGateway.gateway().url;

const webs = (s: RunState) => s.jobs.filter((j) => !j.removed);

const yaml = standInZeroServiceYaml(name, standInGateway.script, '{metric: rps, target: 10, window: 30s, scale_down_delay: 5s}');

/** `n` requests at once through the gateway: how long each took to be answered (ms). */
async function burst(n: number): Promise<number[]> {
  return Promise.all(
    Array.from({ length: n }, async () => {
      const sent = Date.now();
      await chatThrough(`${gatewayUrl()}/services/${name}/`);
      return Date.now() - sent;
    }),
  );
}

describe('a service scaled to zero', () => {
  it('holds the first requests while a replica wakes, goes back to zero once idle, and wakes again', async () => {
    workers.push(await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: standInGateway.workerEnv() }));
    const plan = serviceRunPlan(loadServicePlan(yaml, 'svc.yml', { environ: {} }), null);
    expect(plan.groups[0]?.nodes).toBe(0);
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }] });
    // Serving with no replica: its table is on the gateway, holding.
    const idle = await waitForRunState(handle, (s) => s.status === 'RUNNING' && (s.service?.table_generation ?? 0) > 0, 60_000);
    expect(webs(idle)).toEqual([]);

    // Three requests at once: held, then all answered by the replica they woke.
    const first = await burst(3);
    const woken = await handle.query(runStateQuery);
    expect(webs(woken)).toHaveLength(1);
    expect(webs(woken)[0]?.status).toBe('READY');
    console.log(`scale from zero: first requests answered after ${first.join(', ')} ms`);
    const details = (await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '';
    expect(details).toMatch(/- 0: [\d.]+ rps \(target 10 per replica\)(, \d+ held waking it from zero)? → 1 wanted/);

    // No request for the window (30 s) and the delay (5 s): back to zero, drained.
    await waitForRunState(handle, (s) => webs(s).length === 0, 90_000);
    // And woken again by the next request.
    const again = await burst(1);
    console.log(`scale from zero again: answered after ${again.join(', ')} ms`);
    const state = await handle.query(runStateQuery);
    expect(webs(state)).toHaveLength(1);
    expect(state.jobs.every((j) => j.restarts === 0)).toBe(true);

    await stopLeavingNothing(handle, fleet.stateDir);
  }, 300_000);
});
