import type { ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeClient, type RunState } from '../../src/client';
import { runWorkflowId } from '../../src/contract/ids';
import { FleetClient } from '../../src/fleet/fleet-client';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { writeReplicaServer } from '../helpers/replica-server';
import { uniqueTaskQueue } from '../helpers/temporal';
import { kill9 } from '../helpers/worker-process-control';
import { expectAllClean, fleetYaml, startCliWorker, startSshFleetEnv, troupeCli, waitForRun, type CliResult, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * `scaling.replica_metrics` for replicas on SSH hosts behind their fleet's proxy_jump, on a subnet the
 * worker (a `troupe worker` in the root network namespace) has no route to: the worker reads each
 * decode replica's own counter through the jump host, and the group grows on it, 1 → 2. Each decode
 * replica's counter counts 50 requests a second by itself (no traffic is sent: nothing but the counter
 * can grow the group), the target is 20 per replica. The gateway has no `--ssh-identity`: it cannot
 * reach these replicas, so the figures that size decode come from the worker alone.
 */

const HIDDEN = ['hid0', 'hid1', 'hid2'];
const taskQueue = uniqueTaskQueue('ssh-rm-jump');
const suffix = taskQueue.slice(-6);
const fleetName = `rm-jump-${suffix}`;
const name = `rm-jump-${suffix}`;

let env: SshFleetEnv;
let gateway: GatewayProcess;
let worker: ChildProcess;
let troupe: TroupeClient;
let fleets: FleetClient;

beforeAll(async () => {
  env = await startSshFleetEnv([{ name: 'jump' }, ...HIDDEN.map((n) => ({ name: n, behindJump: 'jump' }))]);
  gateway = await startGatewayProcess(env.dir);
  worker = await startCliWorker({ TROUPE_TASK_QUEUE: taskQueue, TROUPE_STATE_DIR: join(env.dir, 'state'), TROUPE_KNOWN_HOSTS: env.hosts.knownHostsFile }, [
    '--gateway',
    gateway.adminUrl,
    '--gateway-token-file',
    gateway.adminTokenFile,
  ]);
  troupe = new TroupeClient(env.client, { taskQueue });
  fleets = new FleetClient(env.client, { taskQueue });
}, 120_000);

afterAll(async () => {
  // Only what a failed test left going: the run aborted, the fleet deleted, then what this file started, by pid.
  const state = troupe ? await troupe.run(name).state().catch(() => null) : null;
  if (state && !['DONE', 'FAILED', 'TERMINATED'].includes(state.status)) {
    await cli(['stop', name, '-x', '-y']);
    await troupe.run(name).wait().catch(() => undefined);
  }
  if (fleets) await fleets.delete(fleetName, { force: true }).catch(() => undefined);
  if (worker) await kill9(worker);
  if (gateway) await kill9(gateway.child);
  await env?.close();
}, 120_000);

const cli = (args: string[]): Promise<CliResult> => troupeCli({ ...env, taskQueue }, args);

const live = (s: RunState) => s.jobs.filter((j) => !j.removed);
const decodes = (s: RunState) => live(s).filter((j) => j.group_name === 'decode');

describe('replica_metrics behind a proxy_jump', () => {
  it("decode grows 1 → 2 on its replicas' own counters, read by the worker through the jump host", async () => {
    writeFileSync(join(env.dir, 'fleet.yml'), fleetYaml(env, fleetName, HIDDEN));
    const fleet = await cli(['fleet', 'apply', '-f', join(env.dir, 'fleet.yml'), '-y']);
    expect(fleet.code, fleet.stderr).toBe(0);
    const yaml = [
      'type: service',
      `name: ${name}`,
      'port: 8000',
      'auth: false',
      `fleets: [${fleetName}]`,
      'probes:',
      '  - type: http',
      '    url: /ready',
      '    interval: 1s',
      'groups:',
      '  - name: router',
      '    replicas: 1',
      '    resources: {cpu: 1.., memory: 1GB.., disk: 1GB..}',
      '    router:',
      '      type: smg',
      '    commands:',
      `      - ${writeReplicaServer(env.dir)('router')}`,
      '  - name: decode',
      '    replicas: 1..2',
      '    resources: {cpu: 1.., memory: 1GB.., disk: 1GB..}',
      '    scaling: {metric: rps, target: 20, window: 30s, scale_up_delay: 0s, scale_down_delay: 10m, replica_metrics: {port: 8000, requests: replica_answered_total}}',
      '    commands:',
      `      - ANSWER_RATE=50 ${writeReplicaServer(env.dir)('decode')}`,
      '',
    ].join('\n');
    writeFileSync(join(env.dir, 'service.yml'), yaml);
    const applied = await cli(['apply', '-f', join(env.dir, 'service.yml'), '-y', '-d']);
    expect(applied.code, applied.stderr).toBe(0);

    const t0 = Date.now();
    const details = async () => (await env.client.workflow.getHandle(runWorkflowId(name)).query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '';
    const grown = await waitForRun({ troupe }, name, (s) => s.status === 'FAILED' || (decodes(s).length === 2 && decodes(s).every((j) => j.status === 'READY')), 60_000).catch(async (err: unknown) => {
      // What the autoscaler said last: its verdict, or why the replicas could not be read.
      throw new Error(`${(err as Error).message.split('\n')[0]}\n${await details().catch(() => '')}`);
    });
    expect(grown.message).toBeNull();
    console.log(`${name}: decode 1 → 2 READY ${((Date.now() - t0) / 1000).toFixed(1)} s after the apply`);
    // Every replica is on a hidden host, which the worker's namespace has no route to.
    const hidden = new Set(HIDDEN.map((h) => env.hosts.host(h).address));
    expect(live(grown).map((j) => j.instance?.internal_ip).filter((ip) => !hidden.has(ip ?? ''))).toEqual([]);
    const address = decodes(grown)[0]?.instance?.internal_ip ?? '';
    await expect(fetch(`http://${address}:8000/metrics`, { signal: AbortSignal.timeout(3_000) })).rejects.toThrow();
    // Grown on the replicas' own counters (read through the jump host), and no reading failed since.
    const meta = await details();
    expect(meta).toMatch(/\*\*Autoscaling\*\*\n- decode: [\d.]+ rps, its replicas' own \(target 20 per replica\) → 2 wanted/);
    expect(meta).not.toMatch(/could not be read/);

    const stopped = await cli(['stop', name, '-y']);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect((await troupe.run(name).wait()).status).toBe('TERMINATED');
    await expectAllClean({ ...env, fleets }, fleetName);
  }, 180_000);
});
