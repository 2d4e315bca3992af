import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type RunningGateway } from '../../src/gateway/gateway';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { runWorkflowId } from '../../src/contract/ids';
import { applyServiceUpdate, stopRunSignal } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { leftovers } from '../helpers/leftovers';
import { abortRunIfRunning } from '../helpers/stand-in-service';
import { writeReplicaServer } from '../helpers/replica-server';
import { startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/**
 * A deployment of a running service on the local fleet behind a real gateway: changed commands
 * roll one replica at a time (a new one READY and on the gateways before an old one is drained and
 * removed) while requests keep coming — not one fails, every answer is from the old or the new
 * deployment, and after it only the new one answers; what cannot change is refused, changing nothing.
 */

const ADMIN_TOKEN = `admin-${randomBytes(12).toString('hex')}`;
const env = useWorkerProcesses('service-deploy');
const { fleet, taskQueue, workers } = env;
const name = `dep-${randomBytes(3).toString('hex')}`;
let gateway: RunningGateway;

const replica = writeReplicaServer(env.shared.dir);

const service = (version: string, port = 8000) =>
  serviceRunPlan(
    loadServicePlan(
      [
        'type: service',
        `name: ${name}`,
        `port: ${port}`,
        'auth: false',
        'groups:',
        '  - name: web',
        '    replicas: 2',
        '    commands:',
        `      - ${replica(version)}`,
      ].join('\n'),
      'svc.yml',
      { environ: {} },
    ),
    null,
  );

beforeAll(async () => {
  gateway = await startGateway({ listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, adminToken: ADMIN_TOKEN });
});
afterAll(async () => {
  await abortRunIfRunning(env.client, name);
  await gateway?.close(1000);
}, 120_000);

async function call(path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`${gateway.url}/services/${name}${path}`, { signal: AbortSignal.timeout(10_000) });
  return { status: res.status, body: await res.text() };
}

describe('a deployment of a running service', () => {
  it('rolls changed commands one replica at a time under load: no request fails, then only the new deployment answers', async () => {
    workers.push(await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: { TROUPE_GATEWAYS: gateway.adminUrl, TROUPE_GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN } }));
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan: service('v1'), backend: 'local', options: { stop_grace_s: 1 } }] });
    await waitForRunState(handle, (s) => s.jobs.filter((j) => !j.removed && j.status === 'READY').length === 2 && (s.service?.table_generation ?? 0) > 0);
    expect((await call('/who')).body).toMatch(/^v1 [01]\n$/);

    // Refused before anything changes: the port of a running service.
    await expect(handle.executeUpdate(applyServiceUpdate, { args: [{ plan: service('v1', 9000) }] })).rejects.toThrow();

    let running = true;
    const seen = new Set<string>();
    const failures: string[] = [];
    let sent = 0;
    const load = (async () => {
      while (running) {
        sent += 1;
        const path = sent % 5 === 0 ? '/slow' : '/who';
        const answer = await call(path).catch((err: unknown) => ({ status: 0, body: String(err) }));
        if (answer.status === 200) seen.add(answer.body.split(' ')[0] ?? '');
        else failures.push(`${answer.status} ${answer.body}`);
      }
    })();
    const result = await handle.executeUpdate(applyServiceUpdate, { args: [{ plan: service('v2') }] });
    running = false;
    await load;
    expect(result).toEqual({ deployment: 1, rolled: ['web'], groups: [{ name: 'web', replicas: 2 }] });
    expect(failures).toEqual([]);
    expect(sent).toBeGreaterThan(10);
    expect([...seen].sort()).toEqual(['v1', 'v2']);
    for (let i = 0; i < 6; i++) expect((await call('/who')).body).toMatch(/^v2 /);

    const state: RunState = await waitForRunState(handle, (s) => s.service?.deployment === 1);
    const live = state.jobs.filter((j) => !j.removed);
    expect(live.map((j) => j.status)).toEqual(['READY', 'READY']);
    // The old replicas were drained and removed, not restarted (a second new one may take a removed rank again).
    expect(live.every((j) => j.restarts === 0)).toBe(true);
    const removed = [...state.jobs.filter((j) => j.removed).map((j) => j.message), ...live.flatMap((j) => j.previous_attempts.map((a) => a.message))];
    expect(removed.filter((m) => m === 'removed: web resized to 2')).toHaveLength(2);

    await handle.signal(stopRunSignal, { abort: false });
    const final: RunState = await handle.result();
    expect(final.status).toBe('TERMINATED');
    expect((await call('/who')).status).toBe(404);
    expect(leftovers(final, fleet.stateDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
  }, 300_000);
});
