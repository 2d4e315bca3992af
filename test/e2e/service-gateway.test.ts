import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenHash } from '../../src/gateway/token-auth';
import { startGateway, type RunningGateway } from '../../src/gateway/gateway';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { runWorkflowId } from '../../workflows/ids';
import { stopRunSignal } from '../../workflows/messages';
import type { RunState } from '../../workflows/run-state';
import { leftovers } from '../helpers/leftovers';
import { kill9, startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/**
 * A service on the local fleet behind a real gateway: the run pushes its routing table as its
 * replicas become READY, requests reach them through the gateway with the service's token, the
 * worker killed with SIGKILL fails no request (the table lives in the gateway), and a stop takes
 * the service off the gateway and leaves nothing behind.
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

/** Two replicas of a small HTTP server that says which replica answered. */
const SERVICE = [
  'type: service',
  `name: ${name}`,
  'port: 8000',
  'groups:',
  '  - name: web',
  '    replicas: 2',
  '    commands:',
  '      - cd "$(mktemp -d)" && echo "replica $DSTACK_NODE_RANK" > who && exec python3 -m http.server 8000',
].join('\n');

async function call(path: string, bearer: string | null = token): Promise<{ status: number; body: string }> {
  const res = await fetch(`${gateway.url}/services/${name}${path}`, { headers: bearer ? { authorization: `Bearer ${bearer}` } : {}, signal: AbortSignal.timeout(10_000) });
  return { status: res.status, body: await res.text() };
}

describe('a service behind the gateway', () => {
  it('serves through the gateway once READY, through a killed worker without a failed request, and is gone after stop', async () => {
    workers.push(await worker());
    const plan = serviceRunPlan(loadServicePlan(SERVICE, 'svc.yml', { environ: {} }), [tokenHash(token)]);
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }] });

    const serving = await waitForRunState(handle, (s) => s.jobs.every((j) => j.status === 'READY') && s.service?.table_generation !== undefined && gatewayHas(2));
    expect(serving.service?.endpoints).toEqual([`${gateway.url}/services/${name}/`]);

    // Both replicas answer, and only with the token.
    const answers = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const { status, body } = await call('/who');
      expect(status).toBe(200);
      answers.add(body.trim());
    }
    expect([...answers].sort()).toEqual(['replica 0', 'replica 1']);
    expect((await call('/who', null)).status).toBe(401);
    expect((await call('/who', 'wrong')).status).toBe(403);

    // Load while the worker is killed and another takes over: not one request fails.
    let sent = 0;
    const failures: string[] = [];
    let loading = true;
    const load = (async () => {
      while (loading) {
        sent += 1;
        const answer = await call('/who').catch((err: unknown) => ({ status: 0, body: String(err) }));
        if (answer.status !== 200) failures.push(`${answer.status} ${answer.body}`);
      }
    })();
    await new Promise((r) => setTimeout(r, 500));
    await kill9(workers[0]!);
    await new Promise((r) => setTimeout(r, 1500));
    workers.push(await worker());
    await new Promise((r) => setTimeout(r, 500));
    loading = false;
    await load;
    expect(failures).toEqual([]);
    expect(sent).toBeGreaterThan(20);

    await handle.signal(stopRunSignal, { abort: false });
    const final: RunState = await handle.result();
    expect(final.status).toBe('TERMINATED');
    expect(final.message).toBeNull();
    // Off the gateway: 404, not a replica that is gone.
    expect((await call('/who')).status).toBe(404);
    expect(gateway.services.tables().map((t) => t.run)).not.toContain(name);
    expect(leftovers(final, fleet.stateDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
  }, 240_000);
});

/** The gateway's table of this service lists `n` ready replicas. */
function gatewayHas(n: number): boolean {
  const table = gateway.services.tables().find((t) => t.run === name);
  return table?.revisions.flatMap((r) => r.groups.flatMap((g) => g.replicas)).filter((r) => r.state === 'ready').length === n;
}
