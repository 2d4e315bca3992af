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
import { closeServiceEnv, expectAllClean, fleetYaml, startGatewayCliWorker, startSshFleetEnv, troupeCli, waitForRun, type CliResult, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * `scaling.replica_metrics` for replicas on SSH hosts behind their fleet's proxy_jump, on a subnet the
 * worker (a `troupe worker` in the root network namespace) has no route to: the worker reads each
 * decode replica's own counter through the jump host, and the group grows on it, 1 → 2. Each decode
 * replica's counter counts 50 requests a second by itself (no traffic is sent: nothing but the counter
 * can grow the group), the target is 20 per replica. The gateway has no `--ssh-identity`: it cannot
 * reach these replicas, so the figures that size decode come from the worker alone. Then a coherent
 * rollout on the same hosts: its gate A, sent from the worker, reaches the new router through the jump
 * host and passes there — and fails through the gateway, which has no way to the new router, so users
 * could not reach the new revision either: it is rolled back, the old one serving.
 */

/** Four: the rollout's new revision (router and decode) starts beside the old one. */
const HIDDEN = ['hid0', 'hid1', 'hid2', 'hid3'];
const taskQueue = uniqueTaskQueue('ssh-rm-jump');
const suffix = taskQueue.slice(-6);
const fleetName = `rm-jump-${suffix}`;
const name = `rm-jump-${suffix}`;
const rolled = `gate-jump-${suffix}`;

let env: SshFleetEnv;
let gateway: GatewayProcess;
let worker: ChildProcess;
let troupe: TroupeClient;
let fleets: FleetClient;

beforeAll(async () => {
  env = await startSshFleetEnv([{ name: 'jump' }, ...HIDDEN.map((n) => ({ name: n, behindJump: 'jump' }))]);
  gateway = await startGatewayProcess(env.dir);
  worker = await startGatewayCliWorker(env, taskQueue, gateway);
  troupe = new TroupeClient(env.client, { taskQueue });
  fleets = new FleetClient(env.client, { taskQueue });
}, 120_000);

afterAll(async () => {
  await closeServiceEnv(env, taskQueue, { runs: [name, rolled], fleets: [fleetName], processes: [worker, gateway?.child] });
}, 120_000);

const cli = (args: string[]): Promise<CliResult> => troupeCli({ ...env, taskQueue }, args);

const live = (s: RunState) => s.jobs.filter((j) => !j.removed);

/** A service's YAML on this file's fleet, probed on `/ready` every second, up to its router group's commands; `extra`: top-level lines. */
const serviceUpToRouter = (run: string, extra: string[] = []): string[] => [
  'type: service',
  `name: ${run}`,
  'port: 8000',
  'auth: false',
  ...extra,
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
];
const decodes = (s: RunState) => live(s).filter((j) => j.group_name === 'decode');

describe('replica_metrics behind a proxy_jump', () => {
  it("decode grows 1 → 2 on its replicas' own counters, read by the worker through the jump host", async () => {
    writeFileSync(join(env.dir, 'fleet.yml'), fleetYaml(env, fleetName, HIDDEN));
    const fleet = await cli(['fleet', 'apply', '-f', join(env.dir, 'fleet.yml'), '-y']);
    expect(fleet.code, fleet.stderr).toBe(0);
    const yaml = [
      ...serviceUpToRouter(name),
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

  it("a coherent rollout's gate A reaches the new router through the jump host; the gateway, which cannot, fails it and it is rolled back", async () => {
    writeFileSync(join(env.dir, 'fleet.yml'), fleetYaml(env, fleetName, HIDDEN));
    expect((await cli(['fleet', 'apply', '-f', join(env.dir, 'fleet.yml'), '-y'])).code).toBe(0);
    const server = writeReplicaServer(env.dir);
    const spec = (label: string) =>
      [
        ...serviceUpToRouter(rolled, ['rollout: {coherence: revision}']),
        '    commands:',
        `      - ${server(`router-${label}`)}`,
        '  - name: decode',
        '    replicas: 1',
        '    resources: {cpu: 1.., memory: 1GB.., disk: 1GB..}',
        '    commands:',
        `      - ${server(`decode-${label}`)}`,
        '',
      ].join('\n');
    const apply = async (label: string) => {
      writeFileSync(join(env.dir, 'rolled.yml'), spec(label));
      return await cli(['apply', '-f', join(env.dir, 'rolled.yml'), '-y', '-d']);
    };
    const first = await apply('v1');
    expect(first.code, first.stderr).toBe(0);
    await waitForRun({ troupe }, rolled, (s) => s.status === 'FAILED' || (live(s).length === 2 && live(s).every((j) => j.status === 'READY')), 60_000);
    const deploying = apply('v2');
    const over = await waitForRun({ troupe }, rolled, (s) => s.status === 'FAILED' || (s.service?.rollout?.deployment === 1 && s.service.rollout.phase === 'over'), 120_000).catch(async (err: unknown) => {
      const state = await troupe.run(rolled).state().catch(() => null);
      throw new Error(`${(err as Error).message.split('\n')[0]}\n${JSON.stringify(state?.service?.rollout)}`);
    });
    // The deployment's own answer: not deployed (exit 1), and why, naming what to do.
    const second = await deploying;
    expect(second.code, second.stderr).toBe(1);
    expect(second.stderr).toMatch(/through gateway .*this gateway has no SSH key for it: start the gateway with --ssh-identity FILE/);
    // The worker's own request went through the jump host (without it: `… connect EHOSTUNREACH`, or a
    // timeout, and the gate's error would be that one); the gateway's, with no SSH identity, did not.
    expect(over.service?.rollout?.error).toMatch(/^deployment 1 rolled back: gate A failed: GET \/ready to http:\/\/[\d.]+:8000 through gateway http:\/\/127\.0\.0\.1:\d+: .+; revision 0 serves$/);
    expect(over.service?.rollout?.synthetic).toMatch(/^round 1: failed: GET \/ready to http:\/\/[\d.]+:8000 through gateway /);
    expect(live(over).map((j) => j.revision)).toEqual([0, 0]);
    const hidden = new Set(HIDDEN.map((h) => env.hosts.host(h).address));
    expect(live(over).map((j) => j.instance?.internal_ip).filter((ip) => !hidden.has(ip ?? ''))).toEqual([]);
    console.log(`${rolled}: ${over.service?.rollout?.synthetic}`);

    expect((await cli(['stop', rolled, '-y'])).code).toBe(0);
    expect((await troupe.run(rolled).wait()).status).toBe('TERMINATED');
    await expectAllClean({ ...env, fleets }, fleetName);
  }, 240_000);
});
