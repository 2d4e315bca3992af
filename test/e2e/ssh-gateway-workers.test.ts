import { execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Socket } from 'node:net';
import { buildConnector, Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLoop } from '../../bench/harness/open-loop';
import { TroupeClient, type RunState } from '../../src/client';
import { FleetClient } from '../../src/fleet/fleet-client';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { writeReplicaServer } from '../helpers/replica-server';
import { uniqueTaskQueue } from '../helpers/temporal';
import { kill9 } from '../helpers/worker-process-control';
import { closeServiceEnv, expectAllClean, fleetYaml, startGatewayCliWorker, startSshFleetEnv, troupeCli, waitForRun, type CliResult, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * `troupe gateway --workers 2` serving a service whose two replicas are on hosts behind a jump host, on a
 * subnet the gateway has no route to (a private GPU network): every data-plane process reaches them
 * through an SSH connection of its own to the jump host. Under a steady open-loop load (10 rps, pinned
 * keep-alive connections, so each request is known to be served by the process that holds its
 * connection, as `ss` shows): both processes serve, each through its own tunnel; one killed with SIGKILL
 * loses at most the requests it had in flight, the cluster replaces it and the replacement serves through
 * a new tunnel of its own; the Troupe worker killed fails no request; `troupe stop` leaves nothing on the
 * hosts and no SSH connection of the gateway to the jump host.
 */

const JUMP = 'jump';
const HIDDEN = ['hid0', 'hid1'];
const RATE = 10;
const SECONDS = 24;
/** Keep-alive connections the load spreads its requests over, handed to the data-plane processes in turn. */
const CONNECTIONS = 4;

let env: SshFleetEnv;
let gateway: GatewayProcess;
let worker: ChildProcess;
let troupe: TroupeClient;
let fleets: FleetClient;
let gatewayKey = '';
const taskQueue = uniqueTaskQueue('ssh-gw-workers');
const suffix = taskQueue.slice(-6);
const fleetName = `gww-fleet-${suffix}`;
const name = `ssh-gww-${suffix}`;
const clients: Client[] = [];

beforeAll(async () => {
  env = await startSshFleetEnv([{ name: JUMP }, ...HIDDEN.map((n) => ({ name: n, behindJump: JUMP }))]);
  const permit = HIDDEN.map((h) => `permitopen="${env.hosts.host(h).address}:8000"`).join(',');
  gatewayKey = await env.hosts.authorizedClientKey('gateway_ed25519', `restrict,port-forwarding,${permit}`);
  gateway = await startGatewayProcess(env.dir, ['--ssh-identity', gatewayKey, '--workers', '2']);
  worker = await startWorker();
  troupe = new TroupeClient(env.client, { taskQueue });
  fleets = new FleetClient(env.client, { taskQueue });
}, 120_000);

afterAll(async () => {
  await Promise.all(clients.map((c) => c.destroy().catch(() => undefined)));
  await closeServiceEnv(env, taskQueue, { runs: [name], fleets: [fleetName], processes: [worker, gateway?.child] });
}, 120_000);

const startWorker = (): Promise<ChildProcess> => startGatewayCliWorker(env, taskQueue, gateway);

const cli = (args: string[]): Promise<CliResult> => troupeCli({ ...env, taskQueue }, args);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const live = (s: RunState) => s.jobs.filter((j) => !j.removed);
const readyCount = (s: RunState) => live(s).filter((j) => j.status === 'READY').length;

function serviceYaml(command: string): string {
  return [
    'type: service',
    `name: ${name}`,
    'port: 8000',
    `fleets: [${fleetName}]`,
    'probes:',
    '  - type: http',
    '    url: /where',
    '    interval: 1s',
    'replicas: 2',
    'resources: {cpu: 1.., memory: 1GB.., disk: 1GB..}',
    'commands:',
    `  - ${command}`,
    '',
  ].join('\n');
}

/** The data-plane processes: the gateway primary's children (node:cluster's workers). */
function dataPlanePids(): number[] {
  const primary = gateway.child.pid ?? 0;
  const children = readFileSync(`/proc/${primary}/task/${primary}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  return children.filter((pid) => existsSync(`/proc/${pid}/cmdline`) && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('troupe-gateway-worker'));
}

/** Established TCP connections of the root namespace matching an `ss` filter: the owning pid and the far end's port. */
function sockets(filter: string[]): Array<{ pid: number; localPort: number; peerPort: number }> {
  const out = execFileSync('ss', ['-tnpH', 'state', 'established', ...filter], { encoding: 'utf8' });
  return out
    .split('\n')
    .filter(Boolean)
    .flatMap((line) => {
      const cols = line.trim().split(/\s+/);
      const pid = /pid=(\d+)/.exec(line)?.[1];
      const local = cols[2] ?? '';
      const peer = cols[3] ?? '';
      if (pid === undefined) return [];
      return [{ pid: Number(pid), localPort: Number(local.slice(local.lastIndexOf(':') + 1)), peerPort: Number(peer.slice(peer.lastIndexOf(':') + 1)) }];
    });
}

/** The gateway's SSH connections to the jump host, by process: pid → its local ports. */
function jumpConnections(): Map<number, number[]> {
  const jump = env.hosts.host(JUMP);
  const gatewayPids = new Set([gateway.child.pid ?? 0, ...dataPlanePids()]);
  const byPid = new Map<number, number[]>();
  for (const s of sockets(['dst', '=', `${jump.address}:${jump.port}`])) {
    if (!gatewayPids.has(s.pid)) continue;
    byPid.set(s.pid, [...(byPid.get(s.pid) ?? []), s.localPort]);
  }
  return byPid;
}

/** One keep-alive connection of the load, its local port recorded at each connect. */
interface Pinned {
  client: Client;
  readonly port: number;
  /** The data-plane process that holds its connection (by `ss`), 0 until known. */
  pid: number;
}

function pinnedConnection(): Pinned {
  const connect = buildConnector({});
  const seen = { port: 0 };
  const client = new Client(gateway.url, {
    pipelining: 1,
    keepAliveTimeout: 60_000,
    connect: (opts, callback) =>
      connect(opts, (err, socket) => {
        if (err || !socket) return callback(err ?? new Error('no socket'), null);
        seen.port = (socket as Socket).localPort ?? 0;
        callback(null, socket);
      }),
  });
  clients.push(client);
  return {
    client,
    get port() {
      return seen.port;
    },
    pid: 0,
  };
}

/** Which data-plane process holds each pinned connection: the gateway's side of it in `ss`. */
function mapToProcesses(pool: Pinned[]): void {
  const url = new URL(gateway.url);
  const held = new Map(sockets(['sport', '=', `:${url.port}`]).map((s) => [s.peerPort, s.pid]));
  for (const p of pool) p.pid = held.get(p.port) ?? 0;
}

/** A request through the gateway on one pinned connection; resolves with the replica's address, throws on anything but 200. */
async function where(p: Pinned, token: string, signal: AbortSignal): Promise<string> {
  const res = await p.client.request({ path: `/services/${name}/where`, method: 'GET', headers: { authorization: `Bearer ${token}` }, signal });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`${res.statusCode} ${text.trim()}`);
  return text.trim().split(' ')[2] ?? '';
}

/** CONNECTIONS new pinned connections, each opened by one request, and the process each landed on. */
async function freshPool(token: string): Promise<Pinned[]> {
  const pool = Array.from({ length: CONNECTIONS }, () => pinnedConnection());
  for (const p of pool) await where(p, token, AbortSignal.timeout(10_000));
  mapToProcesses(pool);
  return pool;
}

interface Sent {
  at: number;
  /** The process its connection was held by when it was sent (0: a connection opened again, unknown). */
  pid: number;
  ok: boolean;
  /** When its answer or its failure came. */
  doneAt?: number;
  error?: string;
  address?: string;
}

describe('troupe gateway --workers 2 with replicas behind a jump host', () => {
  it('both data-plane processes serve through tunnels of their own; one killed loses at most its in-flight requests and is replaced; the worker killed fails none; troupe stop closes the tunnels', async () => {
    const file = join(env.dir, 'fleet.yml');
    writeFileSync(file, fleetYaml(env, fleetName, HIDDEN));
    const fleet = await cli(['fleet', 'apply', '-f', file, '-y']);
    expect(fleet.code, fleet.stderr).toBe(0);
    writeFileSync(join(env.dir, 'svc.yml'), serviceYaml(writeReplicaServer(env.dir)('v1')));
    const applied = await cli(['apply', '-f', join(env.dir, 'svc.yml'), '-y', '-d']);
    expect(applied.code, applied.stderr).toBe(0);
    const token = /^ {2}export TOKEN=(\S+)$/m.exec(applied.stderr + applied.stdout)?.[1] ?? '';
    expect(token, applied.stderr).not.toBe('');
    const ready = await waitForRun({ troupe }, name, (s) => readyCount(s) === 2 && (s.service?.table_generation ?? 0) > 0, 90_000);
    const addresses = new Set(HIDDEN.map((h) => env.hosts.host(h).address));
    expect(new Set(live(ready).map((j) => j.instance?.internal_ip))).toEqual(addresses);
    // Not reachable from here: only through the jump host.
    for (const address of addresses) await expect(fetch(`http://${address}:8000/where`, { signal: AbortSignal.timeout(3_000) })).rejects.toThrow();

    const started = dataPlanePids();
    expect(started, 'two data-plane processes').toHaveLength(2);
    const [first, second] = started as [number, number];
    let pool = await freshPool(token);
    // node:cluster hands new connections to the processes in turn: both hold some of the load's.
    expect(new Set(pool.map((p) => p.pid))).toEqual(new Set([first, second]));

    const sent: Sent[] = [];
    const load = openLoop({
      rate: RATE,
      seconds: SECONDS,
      timeoutMs: 10_000,
      send: async (signal) => {
        const conn = pool[sent.length % pool.length] as Pinned;
        const record: Sent = { at: Date.now(), pid: conn.pid, ok: false };
        sent.push(record);
        try {
          record.address = await where(conn, token, signal);
          record.ok = true;
        } catch (err) {
          record.error = err instanceof Error ? err.message : String(err);
          throw err;
        } finally {
          record.doneAt = Date.now();
        }
      },
    });

    await sleep(5_000);
    // Each data-plane process keeps its own SSH connection to the jump host (the primary one more, for its probes).
    const before = jumpConnections();
    const primary = gateway.child.pid ?? 0;
    expect([primary, first, second].map((pid) => before.get(pid)?.length ?? 0), `SSH connections to the jump host by pid: ${JSON.stringify([...before])}`).toEqual([1, 1, 1]);
    expect(before.size).toBe(3);
    const servedBefore = [first, second].map((pid) => sent.filter((s) => s.ok && s.pid === pid).length);
    expect(servedBefore.every((n) => n > 0), `served by each: ${servedBefore.join(', ')}`).toBe(true);

    // SIGKILL one data-plane process mid-load.
    const killed = first;
    const onKilled = pool.filter((p) => p.pid === killed);
    const killedAt = Date.now();
    process.kill(killed, 'SIGKILL');
    while (existsSync(`/proc/${killed}`) && Date.now() - killedAt < 5_000) await sleep(5);
    const goneAt = Date.now();
    // The cluster starts another; once it listens, new connections reach it in turn.
    let replacement = 0;
    const replaceDeadline = Date.now() + 20_000;
    while (replacement === 0 && Date.now() < replaceDeadline) {
      await sleep(200);
      replacement = dataPlanePids().find((pid) => pid !== first && pid !== second) ?? 0;
    }
    expect(replacement, 'a replacement data-plane process').toBeGreaterThan(0);
    let swappedAt = 0;
    while (swappedAt === 0 && Date.now() < replaceDeadline) {
      const next = await freshPool(token);
      if (next.some((p) => p.pid === replacement)) {
        const old = pool;
        pool = next;
        swappedAt = Date.now();
        void Promise.all(old.map((p) => p.client.close().catch(() => undefined)));
      } else {
        await Promise.all(next.map((p) => p.client.close()));
        await sleep(300);
      }
    }
    expect(swappedAt, 'a connection served by the replacement').toBeGreaterThan(0);
    expect(new Set(pool.map((p) => p.pid))).toEqual(new Set([second, replacement]));

    // The Troupe worker killed under the load: the data plane holds the table.
    await sleep(2_000);
    await kill9(worker);
    const workerKilledAt = Date.now();
    await sleep(5_000);
    const after = jumpConnections();
    worker = await startWorker();

    const result = await load;
    const failed = sent.filter((s) => !s.ok);
    // In flight in the killed process: sent on one of its connections before it was gone, unanswered at the kill.
    const inflight = sent.filter((s) => s.pid === killed && s.at <= goneAt && (s.doneAt ?? Infinity) >= killedAt);
    const lost = failed.map((s) => `${s.at - killedAt} ms after the kill, on ${s.pid === killed ? 'the killed process' : `pid ${s.pid}`}: ${s.error}`);
    console.log(
      `${name}: ${result.sent} requests at ${RATE} rps through 2 data-plane processes, ${result.failed} failed, max lag ${result.maxLagMs.toFixed(0)} ms\n` +
        `  served in the first 5 s: pid ${first} ${servedBefore[0]}, pid ${second} ${servedBefore[1]}\n` +
        `  SIGKILL of pid ${first}, gone in ${goneAt - killedAt} ms, with ${inflight.length} in flight on its ${onKilled.length} of the load's ${CONNECTIONS} connections; replacement pid ${replacement} serving ${swappedAt - killedAt} ms after the kill\n` +
        `  served after: pid ${second} ${sent.filter((s) => s.ok && s.at >= swappedAt && s.pid === second).length}, pid ${replacement} ${sent.filter((s) => s.ok && s.at >= swappedAt && s.pid === replacement).length}; worker killed ${workerKilledAt - killedAt} ms after\n` +
        `  SSH connections to the jump host by pid, before: ${JSON.stringify([...before])}, after: ${JSON.stringify([...after])}\n` +
        `  lost: ${lost.length === 0 ? 'none' : lost.join('; ')}`,
    );

    expect(result.sent).toBe(RATE * SECONDS);
    // What the killed process had in flight is all it can lose: its connections are reset and the
    // gateway cannot answer what it had read; a request not yet written (undici's queue) goes out on a
    // new connection, to a live process. One request at a time per connection: at most one per connection it held.
    expect(failed.filter((s) => !inflight.includes(s)), lost.join('\n')).toEqual([]);
    expect(failed.length).toBeLessThanOrEqual(Math.min(inflight.length, onKilled.length));
    // After the replacement is up, with the Troupe worker killed too: nothing failed.
    expect(sent.filter((s) => s.at >= swappedAt && !s.ok)).toEqual([]);
    expect(sent.filter((s) => s.at >= workerKilledAt).length).toBeGreaterThan(30);
    // Every answer came from the two READY replicas, both serving, through the tunnels.
    expect(new Set(sent.filter((s) => s.ok).map((s) => s.address))).toEqual(addresses);
    expect(readyCount(await waitForRun({ troupe }, name, () => true))).toBe(2);
    // The replacement serves through a new SSH connection of its own; the killed one's is gone.
    expect(sent.filter((s) => s.ok && s.pid === replacement).length).toBeGreaterThan(0);
    expect(after.get(replacement)?.length).toBe(1);
    expect(after.get(second)).toEqual(before.get(second));
    expect(after.has(killed)).toBe(false);

    // `troupe stop`: nothing on the hosts, and no SSH connection of the gateway to the jump host.
    await Promise.all(pool.map((p) => p.client.close()));
    const stopped = await cli(['stop', name, '-y']);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect((await troupe.run(name).wait()).status).toBe('TERMINATED');
    await expectAllClean({ ...env, fleets }, fleetName);
    const closeDeadline = Date.now() + 10_000;
    while (jumpConnections().size > 0 && Date.now() < closeDeadline) await sleep(200);
    expect([...jumpConnections()]).toEqual([]);
    const gone = await fetch(`${gateway.url}/services/${name}/where`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5_000) });
    expect(gone.status).toBe(404);
  }, 300_000);
});
