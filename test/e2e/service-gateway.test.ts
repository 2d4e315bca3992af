import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { BRIDGE } from '../../src/backends/local/netns';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenHash } from '../../src/gateway/token-auth';
import { startGateway, type RunningGateway } from '../../src/gateway/gateway';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { runWorkflowId } from '../../src/contract/ids';
import { scaleGroupUpdate, stopRunSignal } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { leftovers } from '../helpers/leftovers';
import { writeReplicaServer } from '../helpers/replica-server';
import { kill9, startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/**
 * A service on the local fleet behind a real gateway: the run pushes its routing table as its
 * replicas become READY, requests reach them through the gateway with the service's token, the
 * worker killed with SIGKILL, a scale-up and a scale-down (drained) fail no request, and a stop
 * lets the requests in flight finish, takes the service off the gateway and leaves nothing behind.
 */

const ADMIN_TOKEN = `admin-${randomBytes(12).toString('hex')}`;
const env = useWorkerProcesses('service-gw');
const { fleet, taskQueue, workers } = env;
const name = `svc-${randomBytes(3).toString('hex')}`;
const token = randomBytes(18).toString('base64url');
let gateway: RunningGateway;

beforeAll(async () => {
  gateway = await startGateway({ listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, adminToken: ADMIN_TOKEN });
});
// Before the fleet is removed (hooks run in reverse): a run a failed test left going is aborted.
afterAll(async () => {
  const handle = env.client.workflow.getHandle(runWorkflowId(name));
  if ((await handle.describe().catch(() => null))?.status.name === 'RUNNING') {
    if (workers.every((w) => w.exitCode !== null || w.signalCode !== null)) workers.push(await worker());
    await handle.signal(stopRunSignal, { abort: true }).catch(() => undefined);
    await handle.result().catch(() => undefined);
  }
  await gateway?.close(1000);
}, 120_000);

function worker() {
  return startWorkerProcess({
    taskQueue,
    localStateDir: fleet.stateDir,
    env: { TROUPE_GATEWAYS: gateway.adminUrl, TROUPE_GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN },
  });
}

/** Two replicas at start, 1..3 by scaling. */
const replica = writeReplicaServer(env.shared.dir);
const SERVICE = [
  'type: service',
  `name: ${name}`,
  'port: 8000',
  'groups:',
  '  - name: web',
  '    replicas: 1..3',
  '    scaling: {metric: rps, target: 10}',
  '    commands:',
  `      - ${replica()}`,
].join('\n');

async function call(path: string, bearer: string | null = token): Promise<{ status: number; body: string }> {
  const res = await fetch(`${gateway.url}/services/${name}${path}`, { headers: bearer ? { authorization: `Bearer ${bearer}` } : {}, signal: AbortSignal.timeout(10_000) });
  return { status: res.status, body: await res.text() };
}

/** Requests one after another until stopped: how many were sent, and every one that did not get 200. */
function load(path = '/who') {
  let running = true;
  let sent = 0;
  const failures: string[] = [];
  const done = (async () => {
    while (running) {
      sent += 1;
      const began = { phase, at: Date.now() };
      const answer = await call(path).catch((err: unknown) => ({ status: 0, body: String(err) }));
      if (answer.status !== 200) failures.push(`${answer.status} ${answer.body} (sent during ${began.phase}, ${Date.now() - began.at} ms)`);
    }
  })();
  return {
    stop: async () => {
      running = false;
      await done;
      return { sent, failures };
    },
  };
}

let phase = 'start';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a service behind the gateway', () => {
  it('serves once READY; a worker SIGKILL, a scale-up and a drained scale-down fail no request; a stop finishes what is in flight and leaves nothing', async () => {
    workers.push(await worker());
    const plan = serviceRunPlan(loadServicePlan(SERVICE, 'svc.yml', { environ: {} }), [tokenHash(token)]);
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }] });

    const serving = await waitForRunState(handle, (s) => s.jobs.every((j) => j.status === 'READY') && gatewayHas(1));
    expect(serving.service?.endpoints).toEqual([`${gateway.url}/services/${name}/`]);
    expect((await call('/who')).body.trim()).toBe('replica 0');
    // The nodes' bridge keeps its MAC as ports come and go (netns.ts, pinBridgeAddress).
    if (existsSync(`/sys/class/net/${BRIDGE}`)) expect(readFileSync(`/sys/class/net/${BRIDGE}/addr_assign_type`, 'utf8').trim()).toBe('3');
    expect((await call('/who', null)).status).toBe(401);
    expect((await call('/who', 'wrong')).status).toBe(403);

    // Scaled up under load: both new replicas take requests once READY, none fails meanwhile.
    let traffic = load();
    phase = 'scale-up';
    await handle.executeUpdate(scaleGroupUpdate, { args: [{ group: 'web', nodes: 3 }] });
    await waitForRunState(handle, () => gatewayHas(3));
    // Requests at once go to the replica with the fewest in flight: all three take some.
    const spread = await Promise.all(Array.from({ length: 9 }, () => call('/slow')));
    expect([...new Set(spread.map((a) => a.body.trim()))].sort()).toEqual(['replica 0', 'replica 1', 'replica 2']);

    // The worker killed under load, another takes over: the gateway serves on from its table.
    phase = 'kill';
    await kill9(workers[0]!);
    await sleep(1500);
    workers.push(await worker());
    phase = 'scale-down';

    // Scaled down under load, with slow requests in flight to every replica: drained, not cut.
    const slow = Promise.all([1, 2, 3, 4, 5, 6].map(() => call('/slow')));
    await sleep(300);
    await handle.executeUpdate(scaleGroupUpdate, { args: [{ group: 'web', nodes: 1 }] });
    expect((await slow).map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const { sent, failures } = await traffic.stop();
    // What the gateway saw of a failed request (which replica, which reason), should there be one.
    if (failures.length > 0) await sleep(1000);
    const errors = failures.length > 0 ? `${await gateway.metrics.registry.getSingleMetricAsString('troupe_gateway_errors_total')}\n${await gateway.metrics.registry.getSingleMetricAsString('troupe_gateway_requests_total')}` : '';
    expect({ failures, errors }).toEqual({ failures: [], errors: '' });
    expect(sent).toBeGreaterThan(20);
    expect(gatewayHas(1)).toBe(true);

    // A stop: the slow requests in flight finish; then the service is off the gateway.
    traffic = load();
    const inFlight = Promise.all([call('/slow'), call('/slow')]);
    await sleep(300);
    await handle.signal(stopRunSignal, { abort: false });
    expect((await inFlight).map((a) => a.status)).toEqual([200, 200]);
    const final: RunState = await handle.result();
    await traffic.stop();
    expect(final.status).toBe('TERMINATED');
    expect(final.message).toBeNull();
    expect((await call('/who')).status).toBe(404);
    expect(gateway.services.tables().map((t) => t.run)).not.toContain(name);
    expect(leftovers(final, fleet.stateDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
  }, 300_000);
});

/** The gateway's table of this service lists `n` ready replicas. */
function gatewayHas(n: number): boolean {
  const table = gateway.services.tables().find((t) => t.run === name);
  return table?.revisions.flatMap((r) => r.groups.flatMap((g) => g.replicas)).filter((r) => r.state === 'ready').length === n;
}
