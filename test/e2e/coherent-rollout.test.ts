import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type RunningGateway } from '../../src/gateway/gateway';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { projectRoot } from '../../src/devserver/dev-server';
import { runWorkflowId } from '../../src/contract/ids';
import { applyServiceUpdate, stopRunSignal } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import type { Plan } from '../../src/plan/plan-schema';
import { leftovers } from '../helpers/leftovers';
import { abortRunIfRunning, standInPdServiceYaml } from '../helpers/stand-in-service';
import { startWorkerProcess, useWorkerProcesses, waitForRunState } from '../helpers/worker-process-control';

/**
 * A coherent rollout (`rollout.coherence: revision`) of the prefill/decode stand-in service on the
 * local fleet, behind a real gateway, under a steady load: the new revision starts whole beside the
 * old one, the traffic moves in one table, the old one is drained and stopped. Not one request
 * fails and no answer's chain mixes revisions (router, prefill and decode each say theirs). A
 * revision whose decode cannot start is rolled back: the old one serves throughout, never restarted.
 */

const ADMIN_TOKEN = `admin-${randomBytes(12).toString('hex')}`;
const RATE = 25;
const env = useWorkerProcesses('coherent-rollout');
const { fleet, taskQueue, workers } = env;
const name = `coh-${randomBytes(3).toString('hex')}`;
const standIn = join(env.shared.dir, 'stand-in-model.py');
let gateway: RunningGateway;

/** The service; `decode` is decode's command line before the stand-in (a broken one: `exit 1`). */
function service(label: string, decode = ''): Plan {
  return serviceRunPlan(loadServicePlan(standInPdServiceYaml({ name, script: standIn, label, coherence: 'revision', decode }), 'svc.yml', { environ: {} }), null);
}

beforeAll(async () => {
  copyFileSync(join(projectRoot, 'examples', 'services', 'stand-in-model.py'), standIn);
  chmodSync(standIn, 0o644);
  gateway = await startGateway({ listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, adminToken: ADMIN_TOKEN });
});
afterAll(async () => {
  await abortRunIfRunning(env.client, name);
  await gateway?.close(1000);
}, 120_000);

interface Mark {
  group: string;
  revision: string;
}
interface Chain {
  router: string;
  prefill: string;
  decode: string;
}

/** A steady load until stopped: RATE requests a second, each answer's chain of revisions kept, each failure's reason. */
function steadyLoad() {
  const chains: Chain[] = [];
  const failures: string[] = [];
  const inFlight = new Set<Promise<void>>();
  const one = async () => {
    try {
      const res = await fetch(`${gateway.url}/services/${name}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }] }),
        signal: AbortSignal.timeout(20_000),
      });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`${res.status} ${text.trim()}`);
      const mark = (JSON.parse(text) as { troupe: Mark & { prefill: Mark; decode: Mark } }).troupe;
      chains.push({ router: mark.revision, prefill: mark.prefill.revision, decode: mark.decode.revision });
    } catch (err) {
      failures.push(String(err));
    }
  };
  const timer = setInterval(() => {
    const p = one().finally(() => inFlight.delete(p));
    inFlight.add(p);
  }, 1000 / RATE);
  return {
    chains,
    failures,
    async stop() {
      clearInterval(timer);
      await Promise.all([...inFlight]);
    },
  };
}

const live = (s: RunState) => s.jobs.filter((j) => !j.removed);
const mixed = (chains: Chain[]) => chains.filter((c) => c.router !== c.prefill || c.router !== c.decode);

describe('a coherent rollout of a running service', () => {
  it('moves every group to the new revision under load with 0 failed and 0 mixed chains; a revision that cannot start is rolled back', async () => {
    workers.push(await startWorkerProcess({ taskQueue, localStateDir: fleet.stateDir, env: { TROUPE_GATEWAYS: gateway.adminUrl, TROUPE_GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN } }));
    const v1 = service('v1');
    const v2 = service('v2');
    const handle = await env.client.workflow.start('RunWorkflow', { taskQueue, workflowId: runWorkflowId(name), args: [{ plan: v1, backend: 'local', options: { stop_grace_s: 1 } }] });
    const first = await waitForRunState(handle, (s) => live(s).length === 5 && live(s).every((j) => j.status === 'READY') && (s.service?.table_generation ?? 0) > 0, 120_000);
    const oldRanks = live(first).map((j) => j.job_num);

    // The rollout, under load.
    let load = steadyLoad();
    await new Promise((r) => setTimeout(r, 2000));
    const result = await handle.executeUpdate(applyServiceUpdate, { args: [{ plan: v2 }] });
    await new Promise((r) => setTimeout(r, 2000));
    await load.stop();
    expect(result).toEqual({ deployment: 1, rolled: ['router', 'prefill', 'decode'], groups: [{ name: 'router', replicas: 1 }, { name: 'prefill', replicas: 2 }, { name: 'decode', replicas: 2 }] });
    expect(load.failures.slice(0, 5)).toEqual([]);
    expect(load.chains.length).toBeGreaterThan(100);
    expect(mixed(load.chains)).toEqual([]);
    const hash1 = v1.service?.revision;
    const hash2 = v2.service?.revision;
    expect(new Set(load.chains.map((c) => c.router))).toEqual(new Set([hash1, hash2]));
    // Once answered, only the new revision serves; the old replicas were drained and removed, none restarted.
    const after: RunState = await waitForRunState(handle, (s) => s.service?.deployment === 1);
    expect(live(after).map((j) => j.status)).toEqual(['READY', 'READY', 'READY', 'READY', 'READY']);
    expect(live(after).some((j) => oldRanks.includes(j.job_num))).toBe(false);
    expect(after.jobs.every((j) => j.restarts === 0)).toBe(true);

    // A revision whose decode cannot start: rolled back, the serving one untouched.
    const serving = live(after).map((j) => `${j.job_num}:${j.instance?.instance_id}`);
    load = steadyLoad();
    await new Promise((r) => setTimeout(r, 1000));
    const refused = await handle.executeUpdate(applyServiceUpdate, { args: [{ plan: service('v3', 'exit 1') }] }).then(
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

    await handle.signal(stopRunSignal, { abort: false });
    const final: RunState = await handle.result();
    expect(final.status).toBe('TERMINATED');
    expect(leftovers(final, fleet.stateDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
  }, 400_000);
});
