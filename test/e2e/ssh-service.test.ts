import { execFileSync, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLoop, type OpenLoopResult } from '../../bench/harness/open-loop';
import { TroupeClient, type RunState } from '../../src/client';
import { FleetClient } from '../../src/fleet/fleet-client';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { timedSteps } from '../helpers/timed-steps';
import { writeReplicaServer } from '../helpers/replica-server';
import { uniqueTaskQueue } from '../helpers/temporal';
import { kill9 } from '../helpers/worker-process-control';
import { closeServiceEnv, expectAllClean, fleetYaml, startGatewayCliWorker, startSshFleetEnv, troupeCli, waitForRun, type CliResult, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * A service on an SSH fleet, end to end, as a user runs it: three real sshd hosts (test/e2e/hosts),
 * a `troupe gateway` process in the root network namespace and a `troupe worker --gateway`; the
 * service applied with `troupe apply`, its replicas on the hosts reached through the gateway at the
 * hosts' bridge addresses, with the token (401 without), scaled 1 → 2 → 1 (`troupe scale`) and its
 * commands rolled (`troupe apply`) under a steady open-loop load that loses no request; after
 * `troupe stop` the gateway answers 404 and nothing is left on the hosts. Then a replica on a host
 * behind a jump host, on a subnet the gateway has no route to: the gateway reaches it through an SSH
 * tunnel of its own over the jump host (`--ssh-identity`, a key the jump host lets forward to that
 * replica only), and goes on serving it with the worker killed.
 */

const HOSTS = ['h0', 'h1', 'h2'];
/** A host the gateway cannot reach: on a private subnet behind `jump` (the fleet's proxy_jump). */
const HIDDEN = 'hidden';
const RATE = 10;
const SECONDS = 35;

let env: SshFleetEnv;
let gateway: GatewayProcess;
let worker: ChildProcess;
let troupe: TroupeClient;
let fleets: FleetClient;
let hiddenToken = '';
/** The gateway's key: the jump host lets it forward to the hidden host's replica port, and nothing else. */
let gatewayKey = '';
/** The worker's own task queue: startSshFleetEnv's in-process worker pushes to no gateway. */
const taskQueue = uniqueTaskQueue('ssh-service');
const suffix = taskQueue.slice(-6);
const fleetName = `svc-fleet-${suffix}`;
const name = `ssh-svc-${suffix}`;
const hiddenFleet = `svc-hidden-${suffix}`;
const hiddenName = `ssh-hid-${suffix}`;
/** A host the gateway reaches by its name, whose replicas are at a private address (internal_ip) only the host has. */
const PRIVATE_HOST = 'h2';
const PRIVATE_IP = '10.215.77.1';
const privateFleet = `svc-private-${suffix}`;
const privateName = `ssh-priv-${suffix}`;

beforeAll(async () => {
  env = await startSshFleetEnv([...HOSTS.map((n) => ({ name: n })), { name: 'jump' }, { name: HIDDEN, behindJump: 'jump' }]);
  // A private address of host h2 (on its lo: never picked as the host's own internal IP) the root
  // namespace has no route to: its internal_ip in the last test.
  execFileSync('ip', ['-n', env.hosts.host(PRIVATE_HOST).namespace, 'addr', 'add', `${PRIVATE_IP}/32`, 'dev', 'lo']);
  // No route from the root namespace, as from a gateway outside the hosts' private network (this
  // machine's default route would reach a proxy that answers any address).
  execFileSync('ip', ['route', 'replace', 'unreachable', `${PRIVATE_IP}/32`]);
  gatewayKey = await env.hosts.authorizedClientKey(
    'gateway_ed25519',
    `restrict,port-forwarding,permitopen="${env.hosts.host(HIDDEN).address}:8000",permitopen="${PRIVATE_IP}:8000"`,
  );
  // No --ssh-known-hosts: the jump host's key is the one its fleet verified, which the run puts in the table.
  gateway = await startGatewayProcess(env.dir, ['--ssh-identity', gatewayKey]);
  worker = await startWorker();
  troupe = new TroupeClient(env.client, { taskQueue });
  fleets = new FleetClient(env.client, { taskQueue });
}, 120_000);

afterAll(async () => {
  spawnSync('ip', ['route', 'del', 'unreachable', `${PRIVATE_IP}/32`]);
  await closeServiceEnv(env, taskQueue, { runs: [name, hiddenName, privateName], fleets: [fleetName, hiddenFleet, privateFleet], processes: [worker, gateway?.child] });
}, 120_000);

/** `troupe worker` pushing to this file's gateway (started again after a test kills it). */
const startWorker = (): Promise<ChildProcess> => startGatewayCliWorker(env, taskQueue, gateway);

/** `troupe …` on this file's task queue. */
const cli = (args: string[]): Promise<CliResult> => troupeCli({ ...env, taskQueue }, args);

function serviceYaml(command: string, run = name, fleet = fleetName): string {
  return [
    'type: service',
    `name: ${run}`,
    'port: 8000',
    `fleets: [${fleet}]`,
    'probes:',
    '  - type: http',
    '    url: /where',
    '    interval: 1s',
    'replicas: 1..2',
    'scaling: {metric: rps, target: 10}',
    'resources: {cpu: 1.., memory: 1GB.., disk: 1GB..}',
    'commands:',
    `  - ${command}`,
    '',
  ].join('\n');
}

/** A replica's answer to `/where`: its commands' label, its rank, the address it was reached on. */
interface Answer {
  label: string;
  rank: number;
  address: string;
  at: number;
}

function parseWhere(body: string): Omit<Answer, 'at'> {
  const [label, rank, address] = body.trim().split(' ');
  if (label === undefined || rank === undefined || address === undefined) throw new Error(`not an answer of /where: ${JSON.stringify(body)}`);
  return { label, rank: Number(rank), address };
}

interface RoutedReplica {
  url: string;
  state: string;
  via?: unknown;
}

/** The ready replicas the gateway routes a service to (its admin API). */
async function routedReplicas(run = name): Promise<RoutedReplica[]> {
  const res = await fetch(`${gateway.adminUrl}/services`, { headers: { authorization: `Bearer ${readFileSync(gateway.adminTokenFile, 'utf8').trim()}` } });
  const body = (await res.json()) as { services: Array<{ run: string; revisions: Array<{ groups: Array<{ replicas: RoutedReplica[] }> }> }> };
  const table = body.services.find((s) => s.run === run);
  return (table?.revisions ?? []).flatMap((r) => r.groups.flatMap((g) => g.replicas.filter((x) => x.state === 'ready'))).sort((a, b) => a.url.localeCompare(b.url));
}

/** The replica URLs the gateway routes a service to. */
async function routedUrls(run = name): Promise<string[]> {
  return (await routedReplicas(run)).map((x) => x.url);
}

/**
 * Waits until the gateway routes to the state's READY replicas, by their hosts' addresses on the
 * harness's bridge (the gateway runs in the root namespace); a table follows the state by a push.
 */
async function gatewayRoutesTo(state: RunState): Promise<void> {
  const urls = live(state).filter((j) => j.status === 'READY').map((j) => `http://${j.instance?.internal_ip}:8000`).sort();
  const hosts = new Set(Object.values(env.hosts.hosts).map((h) => `http://${h.address}:8000`));
  expect(urls.filter((u) => !hosts.has(u)), 'replica URLs that are not a test host\'s address').toEqual([]);
  const deadline = Date.now() + 15_000;
  while (JSON.stringify(await routedUrls()) !== JSON.stringify(urls) && Date.now() < deadline) await sleep(100);
  expect(await routedUrls()).toEqual(urls);
}

/**
 * waitForRun, and when the state is not reached, what each live job's host says of its readiness
 * (its `readiness` file: absent while it probes) and which job watchers listen: the hosts share
 * this machine's disk.
 */
async function waitForRunOrTell(run: string, done: (s: RunState) => boolean, timeoutMs: number): Promise<RunState> {
  try {
    return await waitForRun({ troupe }, run, done, timeoutMs);
  } catch (err) {
    const state = await troupe.run(run).state().catch(() => null);
    const base = (details: Record<string, string> | undefined) => details?.base_dir ?? '';
    const jobs = (state ? live(state) : []).map((j) => {
      const dir = join(base(j.instance?.details), state?.run_uid ?? '', String(state?.submission ?? 0), j.job_name);
      const readiness = existsSync(join(dir, 'readiness')) ? readFileSync(join(dir, 'readiness'), 'utf8').trim() : '(none)';
      return `${j.job_name} ${j.status} on ${j.instance?.host}: readiness ${readiness}`;
    });
    const watchers = state ? join(base(live(state)[0]?.instance?.details), '.watchers') : '';
    const fifos = watchers && existsSync(watchers) ? readdirSync(watchers).join(', ') : '(none)';
    throw new Error(`${(err as Error).message.split('\n')[0]}\n  ${jobs.join('\n  ')}\n  watchers: ${fifos}`);
  }
}

const live = (s: RunState) => s.jobs.filter((j) => !j.removed);
const readyCount = (s: RunState) => live(s).filter((j) => j.status === 'READY').length;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a service on an SSH fleet', () => {
  it('troupe apply serves it through the gateway from the hosts; a scale 1 → 2 → 1 and a rolled deployment lose no request; troupe stop leaves nothing', async () => {
    const fleetFile = join(env.dir, 'fleet.yml');
    writeFileSync(fleetFile, fleetYaml(env, fleetName, HOSTS));
    const fleet = await cli(['fleet', 'apply', '-f', fleetFile, '-y']);
    expect(fleet.code, fleet.stderr).toBe(0);

    const replica = writeReplicaServer(env.dir);
    writeFileSync(join(env.dir, 'v1.yml'), serviceYaml(replica('v1')));
    writeFileSync(join(env.dir, 'v2.yml'), serviceYaml(replica('v2')));
    const applied = await cli(['apply', '-f', join(env.dir, 'v1.yml'), '-y', '-d']);
    expect(applied.code, applied.stderr).toBe(0);
    const output = applied.stdout + applied.stderr;
    const token = /^ {2}export TOKEN=(\S+)$/m.exec(output)?.[1] ?? '';
    expect(token, output).not.toBe('');
    const endpoint = `${gateway.url}/services/${name}/`;
    expect(output).toContain(`${name}: endpoint ${endpoint}\n`);
    const curlLine = /^ {2}try: (curl .*)$/m.exec(output)?.[1] ?? '';
    expect(curlLine, output).toContain(endpoint);

    const serving = await waitForRunOrTell(name, (s) => readyCount(s) === 1 && (s.service?.table_generation ?? 0) > 0, 60_000);
    expect(serving.service?.endpoints).toEqual([endpoint]);
    // The gateway (root namespace) routes to the host's own address on the harness's bridge.
    const addresses = new Map(HOSTS.map((h) => [env.hosts.host(h).address, h]));
    const first = live(serving)[0]?.instance?.internal_ip ?? '';
    expect(addresses.has(first), `${first} is not a test host's address`).toBe(true);
    await gatewayRoutesTo(serving);

    const call = (bearer: string | null, signal?: AbortSignal) =>
      fetch(`${endpoint}where`, { headers: bearer === null ? {} : { authorization: `Bearer ${bearer}` }, signal: signal ?? AbortSignal.timeout(10_000) });
    /** `n` requests at once to `/slow` (2 s each), resolved with their statuses. */
    const slowCalls = (n: number) =>
      Promise.all(Array.from({ length: n }, () => fetch(`${endpoint}slow`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(10_000) }).then((r) => r.status, () => 0)));
    const res = await call(token);
    expect(res.status).toBe(200);
    expect(parseWhere(await res.text())).toEqual({ label: 'v1', rank: 0, address: first });
    expect((await call(null)).status).toBe(401);
    // The `curl` line `troupe apply` printed works as it is, with the token it exported.
    const curl = spawnSync('bash', ['-c', curlLine], { env: { ...process.env, TOKEN: token }, encoding: 'utf8', timeout: 10_000 });
    expect({ code: curl.status, stdout: curl.stdout }).toEqual({ code: 0, stdout: 'v1 0\n' });

    // A steady open-loop load through the scale 1 → 2 → 1 and the rolled deployment.
    const answers: Answer[] = [];
    const load: Promise<OpenLoopResult> = openLoop({
      rate: RATE,
      seconds: SECONDS,
      timeoutMs: 10_000,
      send: async (signal) => {
        const answer = await call(token, signal);
        const text = await answer.text();
        if (answer.status !== 200) throw new Error(`${answer.status} ${text.trim()}`);
        answers.push({ ...parseWhere(text), at: Date.now() });
      },
    });
    const { lines: steps, step } = timedSteps();

    await step('scaled 1 → 2 (troupe scale)', async () => {
      const scaled = await cli(['scale', name, '0', '2']);
      expect(scaled.code, scaled.stderr).toBe(0);
      await gatewayRoutesTo(await waitForRunOrTell(name, (s) => readyCount(s) === 2, 60_000));
      await sleep(2_000);
    });
    // Two replicas on three hosts: the surge replica takes the third host, then the host of the
    // first old replica, once given back, takes the second new one.
    let rolledAt = 0;
    await step('commands rolled (troupe apply)', async () => {
      // Another backend for a running service is refused before anything changes (exit 1, one line).
      const moved = await cli(['apply', '-f', join(env.dir, 'v2.yml'), '-y', '--backend', 'local']);
      expect([moved.code, moved.stderr.trim()]).toEqual([1, `--backend local: service ${name} runs on backend ssh, and a deployment keeps it; to move the service, troupe stop it and apply again`]);
      const deployed = await cli(['apply', '-f', join(env.dir, 'v2.yml'), '-y']);
      expect(deployed.code, deployed.stderr).toBe(0);
      expect(deployed.stderr).toContain(`Deployment 1 of ${name} is done: rolled 0; replicas 0 2.`);
      rolledAt = Date.now();
      await gatewayRoutesTo(await waitForRunOrTell(name, (s) => s.service?.deployment === 1 && live(s).length === 2 && readyCount(s) === 2, 60_000));
      await sleep(2_000);
    });
    await step('scaled 2 → 1 (troupe scale), slow requests in flight to both', async () => {
      const slow = slowCalls(4);
      await sleep(300);
      const scaled = await cli(['scale', name, '0', '1']);
      expect(scaled.code, scaled.stderr).toBe(0);
      // Drained before its host's process was stopped: every slow one answered.
      expect(await slow).toEqual([200, 200, 200, 200]);
      await gatewayRoutesTo(await waitForRunOrTell(name, (s) => live(s).length === 1 && readyCount(s) === 1, 60_000));
    });
    const stepsDone = Date.now();
    const result = await load;
    const loadEnded = Date.now();
    const tally = new Map<string, number>();
    for (const a of answers) {
      const key = `${a.label} rank ${a.rank} on ${addresses.get(a.address) ?? a.address}`;
      tally.set(key, (tally.get(key) ?? 0) + 1);
    }
    const counts = [...tally].map(([k, n]) => `${k}: ${n}`);
    console.log(`${name}: ${result.sent} requests at ${RATE} rps, ${result.failed} failed, max lag ${result.maxLagMs.toFixed(0)} ms\n  ${steps.join('\n  ')}\n  answers: ${counts.join(', ')}`);

    expect(stepsDone, steps.join('\n')).toBeLessThan(loadEnded);
    expect({ sent: result.sent, failed: result.failed, errors: result.errors }).toEqual({ sent: RATE * SECONDS, failed: 0, errors: [] });
    // Every answer came from a test host, reached at its bridge address; each host served, old and new commands from two each.
    const byHost = (label: string) => [...new Set(answers.filter((a) => a.label === label).map((a) => addresses.get(a.address) ?? a.address))].sort();
    expect(answers.filter((a) => !addresses.has(a.address))).toEqual([]);
    expect(new Set([...byHost('v1'), ...byHost('v2')]).size).toBe(3);
    expect([byHost('v1').length, byHost('v2').length]).toEqual([2, 2]);
    expect(new Set(answers.map((a) => a.rank)).size).toBeGreaterThanOrEqual(2);
    // The old and then the new commands answered; after the roll, only the new ones.
    expect([...new Set(answers.map((a) => a.label))].sort()).toEqual(['v1', 'v2']);
    expect(answers.filter((a) => a.at > rolledAt + 1_000 && a.label !== 'v2')).toEqual([]);
    const after = await call(token);
    expect(parseWhere(await after.text()).label).toBe('v2');

    // `troupe stop` drains too: the slow requests in flight finish.
    const inFlight = slowCalls(2);
    await sleep(300);
    const stopped = await cli(['stop', name, '-y']);
    expect(await inFlight).toEqual([200, 200]);
    expect(stopped.code, stopped.stderr).toBe(0);
    const final = await troupe.run(name).wait();
    expect(final.status).toBe('TERMINATED');
    expect((await call(token)).status).toBe(404);
    await expectAllClean({ ...env, fleets }, fleetName);
    // Nothing listens on the replicas' port of any host any more.
    for (const address of addresses.keys()) {
      await expect(fetch(`http://${address}:8000/where`, { signal: AbortSignal.timeout(3_000) })).rejects.toThrow();
    }
  }, 180_000);

  // The gateway connects to a replica's internal IP; a host behind its fleet's proxy_jump is on a
  // subnet only the jump host reaches, so the run gives its row the jump host (`via`: no secret) and
  // the gateway tunnels through it with its operator's key.
  it('a replica on a host behind a jump host is READY and routed at its private address, through its jump host', async () => {
    const file = join(env.dir, 'hidden-fleet.yml');
    writeFileSync(file, fleetYaml(env, hiddenFleet, [HIDDEN]));
    const fleet = await cli(['fleet', 'apply', '-f', file, '-y']);
    expect(fleet.code, fleet.stderr).toBe(0);
    writeFileSync(join(env.dir, 'hidden.yml'), serviceYaml(writeReplicaServer(env.dir)('v1'), hiddenName, hiddenFleet));
    const applied = await cli(['apply', '-f', join(env.dir, 'hidden.yml'), '-y', '-d']);
    expect(applied.code, applied.stderr).toBe(0);
    hiddenToken = /^ {2}export TOKEN=(\S+)$/m.exec(applied.stderr)?.[1] ?? '';
    const state = await waitForRunOrTell(hiddenName, (s) => readyCount(s) === 1, 60_000);
    const address = env.hosts.host(HIDDEN).address;
    expect(live(state)[0]?.instance?.internal_ip).toBe(address);
    const deadline = Date.now() + 15_000;
    while ((await routedUrls(hiddenName)).length === 0 && Date.now() < deadline) await sleep(100);
    const jump = env.hosts.host('jump');
    // The jump host as its fleet has it, with the key the fleet verified; no key file, no secret.
    expect(await routedReplicas(hiddenName)).toEqual([
      { url: `http://${address}:8000`, state: 'ready', via: { host: jump.address, port: jump.port, user: 'root', host_key_fingerprints: [jump.hostKeyFingerprint] } },
    ]);
    // Not on the harness's bridge: the root namespace has no route to it.
    await expect(fetch(`http://${address}:8000/where`, { signal: AbortSignal.timeout(3_000) })).rejects.toThrow();
  }, 90_000);

  it('requests to that replica through the gateway are answered through its SSH tunnel, with the worker killed too', async () => {
    const call = () => fetch(`${gateway.url}/services/${hiddenName}/where`, { headers: { authorization: `Bearer ${hiddenToken}` }, signal: AbortSignal.timeout(10_000) });
    const expected = { status: 200, body: `v1 0 ${env.hosts.host(HIDDEN).address}\n` };
    const t0 = performance.now();
    const res = await call();
    const body = await res.text();
    const firstMs = performance.now() - t0;
    console.log(`${hiddenName} through the gateway: ${res.status} ${body.trim()} (${firstMs.toFixed(0)} ms, the first request)`);
    expect({ status: res.status, body }).toEqual(expected);
    // The gateway is the data plane: with no worker, it goes on answering over the connection it keeps.
    await kill9(worker);
    const times: number[] = [];
    for (let i = 0; i < 20; i++) {
      const t = performance.now();
      const again = await call();
      expect({ status: again.status, body: await again.text() }).toEqual(expected);
      times.push(performance.now() - t);
    }
    times.sort((a, b) => a - b);
    console.log(`${hiddenName} with the worker killed: 20 of 20 answered, median ${times[10]?.toFixed(1)} ms, max ${times[19]?.toFixed(1)} ms`);
    worker = await startWorker();
  }, 60_000);

  it('troupe stop of that service leaves nothing on the hidden host', async () => {
    const stopped = await cli(['stop', hiddenName, '-y']);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect((await troupe.run(hiddenName).wait()).status).toBe('TERMINATED');
    await expectAllClean({ ...env, fleets }, hiddenFleet);
  }, 60_000);

  // A host reached by its name whose replicas are at its private address (`internal_ip`), with no
  // proxy_jump: the gateway tries the replica straight, finds no route, and goes through the host's own SSH.
  it("a replica at its host's private address (internal_ip, no proxy_jump) is served through that host's SSH", async () => {
    const host = env.hosts.host(PRIVATE_HOST);
    const file = join(env.dir, 'private-fleet.yml');
    writeFileSync(file, fleetYaml(env, privateFleet, [PRIVATE_HOST]).replace(`    - ${host.address}\n`, `    - {hostname: ${host.address}, internal_ip: ${PRIVATE_IP}}\n`));
    expect(readFileSync(file, 'utf8')).toContain(`internal_ip: ${PRIVATE_IP}`);
    const fleet = await cli(['fleet', 'apply', '-f', file, '-y']);
    expect(fleet.code, fleet.stderr).toBe(0);
    writeFileSync(join(env.dir, 'private.yml'), serviceYaml(writeReplicaServer(env.dir)('v1'), privateName, privateFleet));
    const applied = await cli(['apply', '-f', join(env.dir, 'private.yml'), '-y', '-d']);
    expect(applied.code, applied.stderr).toBe(0);
    const token = /^ {2}export TOKEN=(\S+)$/m.exec(applied.stderr)?.[1] ?? '';
    await waitForRunOrTell(privateName, (s) => readyCount(s) === 1, 60_000);
    const deadline = Date.now() + 15_000;
    while ((await routedUrls(privateName)).length === 0 && Date.now() < deadline) await sleep(100);
    expect(await routedReplicas(privateName)).toEqual([
      { url: `http://${PRIVATE_IP}:8000`, state: 'ready', via: { host: host.address, port: host.port, user: 'root', host_key_fingerprints: [host.hostKeyFingerprint], direct_first: true } },
    ]);
    const res = await fetch(`${gateway.url}/services/${privateName}/where`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(15_000) });
    expect({ status: res.status, body: await res.text() }).toEqual({ status: 200, body: `v1 0 ${PRIVATE_IP}\n` });
    const stopped = await cli(['stop', privateName, '-y']);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect((await troupe.run(privateName).wait()).status).toBe('TERMINATED');
    await expectAllClean({ ...env, fleets }, privateFleet);
  }, 120_000);
});
