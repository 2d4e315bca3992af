import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { runWorkflowId } from '../../src/contract/ids';
import { runStateQuery } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { stopLeavingNothing } from '../helpers/leftovers';
import { abortRunIfRunning, chatThrough, standInZeroServiceYaml, useStandInGateway } from '../helpers/stand-in-service';
import { startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/**
 * A service that scales to zero, on the local fleet behind a real gateway: one group of the stand-in
 * model server, `replicas: 0..2` with `scaling: {metric: rps, target: 10, window: 30s,
 * scale_down_delay: 5s}`. It starts with no replica; the gateway holds the first requests (none
 * answered 503) while the autoscaler, woken by them, starts one; once no request came for the window
 * and the delay, it goes back to zero, drained; and a request then wakes it again. Nothing is left
 * after the stop. Then the same behind a router: the stand-in PD service whose decode is `0..1`, sized
 * on its own counter (`replica_metrics`); while decode sleeps the router is off the gateway's table, so
 * the gateway holds the service's requests (none reaches a router with no decode to pass it to), and
 * they wake decode.
 */

const env = useWorkerProcesses('scale-zero');
const { fleet, taskQueue, workers } = env;
const name = `zero-${randomBytes(3).toString('hex')}`;
const standInGateway = useStandInGateway(env, name);
const gatewayUrl = () => standInGateway.gateway().url;
/** The second test's run, behind a router; aborted after the file if a failed test left it running (before the workers go). */
const pd = `${name}-pd`;
afterAll(() => abortRunIfRunning(env.client, pd), 120_000);

const webs = (s: RunState) => s.jobs.filter((j) => !j.removed);

const yaml = standInZeroServiceYaml(name, standInGateway.script, '{metric: rps, target: 10, window: 30s, scale_down_delay: 5s}');

/** `n` requests at once through the gateway to `run`: how long each took to be answered (ms). */
async function burst(n: number, run = name): Promise<number[]> {
  return Promise.all(
    Array.from({ length: n }, async () => {
      const sent = Date.now();
      await chatThrough(`${gatewayUrl()}/services/${run}/`);
      return Date.now() - sent;
    }),
  );
}

/**
 * The stand-in PD service: router, prefill 1, decode 0..1 on its own counter; each READY by its own
 * /health (no chat-completion probe: one a second through the router would count as decode's traffic
 * and keep it awake).
 */
function pdZeroYaml(run: string, script: string): string {
  const replica = (role: string, extra = '') => `      - DEMO_LABEL=v1 exec python3 ${script} --role ${role} --port 8000${extra}`;
  const health = '    ready: {http: {port: 8000, path: /health}, interval: 500ms}';
  return [
    'type: service',
    `name: ${run}`,
    'port: 8000',
    'auth: false',
    'groups:',
    '  - name: router',
    '    replicas: 1',
    '    router: {type: smg}',
    '    depends_on: [prefill]',
    health,
    '    commands:',
    replica('router'),
    '  - name: prefill',
    '    replicas: 1',
    health,
    '    commands:',
    replica('prefill', ' --warmup 1'),
    '  - name: decode',
    '    replicas: 0..1',
    '    scaling: {metric: rps, target: 10, window: 30s, scale_down_delay: 5s, replica_metrics: {port: 8000, requests: stand_in_chat_completions_total}}',
    health,
    '    commands:',
    replica('decode', ' --warmup 1'),
  ].join('\n');
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

  it('behind a router: holds the requests while decode sleeps, wakes it, and puts it back to sleep on its own idle figures', async () => {
    if (workers.length === 0) workers.push(await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: standInGateway.workerEnv() }));
    const plan = serviceRunPlan(loadServicePlan(pdZeroYaml(pd, standInGateway.script), 'svc.yml', { environ: {} }), null);
    expect(plan.groups.map((g) => g.nodes)).toEqual([1, 1, 0]);
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(pd), args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }] });
    const decodes = (s: RunState) => webs(s).filter((j) => j.group_name === 'decode');
    const idle = await waitForRunState(handle, (s) => s.status === 'RUNNING' && webs(s).length === 2 && webs(s).every((j) => j.status === 'READY') && (s.service?.table_generation ?? 0) > 0, 90_000);
    expect(decodes(idle)).toEqual([]);

    // Three requests at once: held at the gateway (the router is off its table), then answered through the decode they woke.
    const t0 = Date.now();
    const first = await burst(3, pd).catch(async (err: unknown) => {
      const s = await handle.query(runStateQuery);
      console.log(`not answered after ${Date.now() - t0} ms; jobs [group, status, running_at, ready_at, removed]:`, JSON.stringify(s.jobs.map((j) => [j.group_name, j.status, j.running_at, j.ready_at, j.removed])), JSON.stringify(s.service), (await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails);
      throw err;
    });
    const woken = await handle.query(runStateQuery);
    expect(decodes(woken)).toHaveLength(1);
    console.log(`scale from zero behind a router: first requests answered after ${first.join(', ')} ms`);
    const details = (await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '';
    expect(details).toMatch(/- decode: [\d.]+ rps, its replicas' own \(target 10 per replica\)(, \d+ held waking it from zero)? → \d wanted/);

    // Its own counter still for scale_down_delay: back to zero, drained; the router stays.
    const slept = await waitForRunState(handle, (s) => decodes(s).length === 0, 90_000).catch(async (err: unknown) => {
      console.log((await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '');
      throw err;
    });
    expect(webs(slept).map((j) => j.group_name).sort()).toEqual(['prefill', 'router']);
    const again = await burst(1, pd);
    console.log(`scale from zero behind a router again: answered after ${again.join(', ')} ms`);
    const state = await handle.query(runStateQuery);
    expect(decodes(state)).toHaveLength(1);
    expect(state.jobs.every((j) => j.restarts === 0)).toBe(true);

    await stopLeavingNothing(handle, fleet.stateDir);
  }, 300_000);
});
