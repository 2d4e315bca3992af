import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { afterAll, beforeAll } from 'vitest';
import { projectRoot } from '../../src/devserver/dev-server';
import { startGateway, type RunningGateway } from '../../src/gateway/gateway';
import { runWorkflowId } from '../../src/contract/ids';
import { stopRunSignal } from '../../src/contract/messages';

/**
 * What the service tests of the stand-in model server (examples/services/stand-in-model.py) share:
 * its probe (a chat completion, which a router passes on through a prefill and a decode replica),
 * and the header of its router group, as YAML lines.
 */
export const STAND_IN_PROBE_YAML = [
  'probes:',
  '  - type: http',
  '    url: /v1/chat/completions',
  '    method: post',
  '    headers:',
  '      - name: Content-Type',
  '        value: application/json',
  `    body: '{"messages": [{"role": "user", "content": "ping"}]}'`,
  '    interval: 1s',
  '    timeout: 5s',
];

/** `groups:` with the router group's header (one smg router after prefill and decode), up to its `commands:`. */
export const STAND_IN_ROUTER_GROUP_YAML = ['groups:', '  - name: router', '    replicas: 1', '    router:', '      type: smg', '    depends_on: [prefill, decode]', '    commands:'];

/**
 * The stand-in PD service as YAML: router 1 / prefill 2 / decode 2 (workers loading for 1 s), each
 * replica `DEMO_LABEL=<label> python3 <script> --role …` on port 8000, rolled with `coherence`;
 * `decode` is a command run before decode's stand-in (a broken one: `exit 1`).
 */
export function standInPdServiceYaml(o: {
  name: string;
  script: string;
  label: string;
  coherence: 'revision' | 'independent';
  /** A command before decode's stand-in (a broken one: `exit 1`). */
  decode?: string;
  /** More of decode's stand-in's flags (` --error-rate 0.2`). */
  decodeFlags?: string;
  /** More lines under `rollout:` (`  canary: {traffic: 20, soak: 5s}`). */
  rollout?: string[];
  /** Decode's replicas (default 2); a range `MIN..MAX` gets a `scaling:` too, so `troupe scale` may resize it. */
  decodeReplicas?: string;
  /** Decode's `scaling` with a range (default `{metric: rps, target: 100}`). */
  decodeScaling?: string;
  /** Prefill's replicas (default 2); a range `MIN..MAX` gets a `scaling:` too, so `troupe scale` may resize it. */
  prefillReplicas?: string;
  /** Prefill's `scaling` with a range (default `{metric: rps, target: 100}`). */
  prefillScaling?: string;
  /** More of the router's stand-in flags (` --decode-group nowhere`). */
  routerFlags?: string;
  /** The router READY by its own `ready` probe (Troupe's extension), `/health`, which answers whatever its peers do. */
  routerReadyHealth?: boolean;
}): string {
  const replica = (role: string, extra = '') => `      - DEMO_LABEL=${o.label} exec python3 ${o.script} --role ${role} --port 8000${extra}`;
  return [
    'type: service',
    `name: ${o.name}`,
    'port: 8000',
    'auth: false',
    'rollout:',
    `  coherence: ${o.coherence}`,
    ...(o.rollout ?? []),
    ...STAND_IN_PROBE_YAML,
    ...STAND_IN_ROUTER_GROUP_YAML.slice(0, -1),
    ...(o.routerReadyHealth ? ['    ready: {http: {port: 8000, path: /health}}'] : []),
    ...STAND_IN_ROUTER_GROUP_YAML.slice(-1),
    replica('router', o.routerFlags ?? ''),
    '  - name: prefill',
    `    replicas: ${o.prefillReplicas ?? 2}`,
    ...(o.prefillReplicas?.includes('..') ? [`    scaling: ${o.prefillScaling ?? '{metric: rps, target: 100}'}`] : []),
    '    commands:',
    replica('prefill', ' --warmup 1'),
    '  - name: decode',
    `    replicas: ${o.decodeReplicas ?? 2}`,
    ...(o.decodeReplicas?.includes('..') ? [`    scaling: ${o.decodeScaling ?? '{metric: rps, target: 100}'}`] : []),
    '    commands:',
    ...(o.decode ? [`      - ${o.decode}`] : []),
    replica('decode', ` --warmup 1${o.decodeFlags ?? ''}`),
  ].join('\n');
}

/**
 * A service of one group of the stand-in (its decode role, which answers a chat completion itself,
 * loading for 1 s) that scales to zero: `replicas: 0..2` with `scaling` (a YAML flow mapping).
 */
export function standInZeroServiceYaml(name: string, script: string, scaling: string): string {
  return [
    'type: service',
    `name: ${name}`,
    'port: 8000',
    'auth: false',
    ...STAND_IN_PROBE_YAML,
    'replicas: 0..2',
    `scaling: ${scaling}`,
    'commands:',
    `  - DEMO_LABEL=v1 exec python3 ${script} --role decode --port 8000 --warmup 1`,
  ].join('\n');
}

/** After a test file: its run aborted if a failed test left it running. */
export async function abortRunIfRunning(client: Client, name: string): Promise<void> {
  const handle = client.workflow.getHandle(runWorkflowId(name));
  if ((await handle.describe().catch(() => null))?.status.name !== 'RUNNING') return;
  await handle.signal(stopRunSignal, { abort: true }).catch(() => undefined);
  await handle.result().catch(() => undefined);
}

/**
 * A test file's stand-in service behind a real gateway in the test's process: the stand-in copied
 * where the fleet's nodes read it (`shared`), a gateway on loopback; after the file, the run `name`
 * aborted if a failed test left it going, and the gateway closed. `workerEnv`: what a worker needs to
 * push its tables to that gateway.
 */
export function useStandInGateway(env: { client: Client; shared: { dir: string } }, name: string) {
  const adminToken = `admin-${randomBytes(12).toString('hex')}`;
  const script = join(env.shared.dir, 'stand-in-model.py');
  let gateway: RunningGateway | null = null;
  beforeAll(async () => {
    copyFileSync(join(projectRoot, 'examples', 'services', 'stand-in-model.py'), script);
    chmodSync(script, 0o644);
    gateway = await startGateway({ listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, adminToken });
  });
  afterAll(async () => {
    await abortRunIfRunning(env.client, name);
    await gateway?.close(1000);
  }, 120_000);
  const running = (): RunningGateway => {
    if (!gateway) throw new Error('the gateway is not started yet');
    return gateway;
  };
  return { script, gateway: running, workerEnv: () => ({ TROUPE_GATEWAYS: running().adminUrl, TROUPE_GATEWAY_ADMIN_TOKEN: adminToken }) };
}

/** What a stand-in replica says of itself in each answer (`troupe`): its group, rank in the group and revision. */
export interface StandInMark {
  group: string;
  replica: number;
  revision: string;
}

/**
 * One chat completion through the gateway at `url` (…/services/<run>/), 20 s at most: the router's
 * mark with its prefill's and decode's, or an error naming the status and the revision whose pool took it.
 */
export async function chatThrough(url: string): Promise<StandInMark & { prefill: StandInMark; decode: StandInMark }> {
  const res = await fetch(`${url}v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }] }),
    signal: AbortSignal.timeout(20_000),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${res.status} revision ${res.headers.get('troupe-revision') ?? '-'}: ${text.trim()}`);
  return (JSON.parse(text) as { troupe: StandInMark & { prefill: StandInMark; decode: StandInMark } }).troupe;
}

/** The revisions one answer went through: the router's, and the prefill's and decode's it called. */
export interface Chain {
  router: string;
  prefill: string;
  decode: string;
}

/** Chains that crossed revisions (none may, with `coherence: revision`). */
export const mixed = (chains: Chain[]) => chains.filter((c) => c.router !== c.prefill || c.router !== c.decode);

/** A steady load until stopped: `rate` chat completions a second to `url()`, each answer's chain of revisions kept, each failure's reason. */
export function steadyLoad(url: () => string, rate: number) {
  const chains: Chain[] = [];
  const failures: string[] = [];
  const inFlight = new Set<Promise<void>>();
  const one = async () => {
    try {
      const mark = await chatThrough(url());
      chains.push({ router: mark.revision, prefill: mark.prefill.revision, decode: mark.decode.revision });
    } catch (err) {
      failures.push(String(err));
    }
  };
  const timer = setInterval(() => {
    const p = one().finally(() => inFlight.delete(p));
    inFlight.add(p);
  }, 1000 / rate);
  return {
    chains,
    failures,
    async stop() {
      clearInterval(timer);
      await Promise.all([...inFlight]);
    },
  };
}
