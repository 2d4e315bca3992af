import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startGateway, type RunningGateway } from '../../src/gateway/gateway';
import { startGatewayCluster } from '../../src/gateway/gateway-cluster';
import { jumpTargetOf, poolKeyOf, TunnelNotConfiguredError, type TunnelOptions } from '../../src/gateway/replica-tunnels';
import { ReplicaSchema, type ReplicaVia } from '../../src/gateway/routing-table';
import { clientKey, JUMP_HIDDEN as HIDDEN, listenUntilCleanup, startJumpHost, type Jump } from '../helpers/ssh-jump-host';

/**
 * The gateway's SSH tunnels to replicas behind a jump host (a row's `via`): the pure parts (row →
 * target, pool key), then a real gateway in front of a jump host played by an ssh2 server on 127.0.0.1,
 * which forwards to a stand-in replica at an address the gateway itself could never reach.
 */

const FINGERPRINT = `SHA256:${'A'.repeat(43)}`;
const VIA: ReplicaVia = { host: '203.0.113.7', port: 2222, user: 'ops', host_key_fingerprints: [FINGERPRINT] };

describe("a replica row's via, pure", () => {
  it('the table takes where the jump host is and its verified key, and no key file (the table is not secret)', () => {
    expect(ReplicaSchema.safeParse({ url: 'http://10.0.0.5:8000', state: 'ready', via: VIA }).success).toBe(true);
    expect(ReplicaSchema.safeParse({ url: 'http://10.0.0.5:8000', state: 'ready', via: { ...VIA, identity_file: '/root/.ssh/id' } }).success).toBe(false);
    expect(ReplicaSchema.safeParse({ url: 'http://10.0.0.5:8000', state: 'ready', via: { ...VIA, host: '-oProxyCommand=x' } }).success).toBe(false);
    expect(ReplicaSchema.safeParse({ url: 'http://10.0.0.5:8000', state: 'ready', via: { ...VIA, port: 0 } }).success).toBe(false);
  });

  it("row → jump target: the gateway's key; the fleet's fingerprint unless the operator gives known_hosts; what to configure otherwise", () => {
    expect(jumpTargetOf(VIA, { identityFile: '/k' })).toEqual({ hostname: '203.0.113.7', port: 2222, user: 'ops', identity_file: '/k', host_key_fingerprints: [FINGERPRINT] });
    expect(jumpTargetOf(VIA, { identityFile: '/k', knownHostsFile: '/kh' })).toEqual({ hostname: '203.0.113.7', port: 2222, user: 'ops', identity_file: '/k' });
    expect(() => jumpTargetOf(VIA, {})).toThrow(TunnelNotConfiguredError);
    expect(() => jumpTargetOf(VIA, {})).toThrow('through jump host ops@203.0.113.7:2222 (its fleet\'s proxy_jump), and this gateway has no SSH key for it: start the gateway with --ssh-identity FILE');
    const unverified = { host: VIA.host, port: VIA.port, user: VIA.user };
    expect(() => jumpTargetOf(unverified, { identityFile: '/k' })).toThrow('has no host key its fleet verified: start the gateway with --ssh-known-hosts FILE');
    expect(jumpTargetOf(unverified, { identityFile: '/k', knownHostsFile: '/kh' }).hostname).toBe('203.0.113.7');
  });

  it('pool key: the origin alone for a direct replica, one per jump host for one behind', () => {
    expect(poolKeyOf('http://10.0.0.5:8000', undefined)).toBe('http://10.0.0.5:8000');
    const keys = new Set([poolKeyOf('http://10.0.0.5:8000', undefined), poolKeyOf('http://10.0.0.5:8000', VIA), poolKeyOf('http://10.0.0.5:8000', { ...VIA, host: '203.0.113.8' })]);
    expect(keys.size).toBe(3);
  });
});

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
const atCleanup = (cleanup: () => Promise<void> | void): void => void cleanups.push(cleanup);

function keyDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-tunnels-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const jumpHost = (allowed: Buffer, forwards = true): Promise<Jump> => startJumpHost(allowed, atCleanup, forwards);

/** A replica on 127.0.0.1 (as the jump host sees it): answers `replica <Host header>`, `/health` 200. */
async function replica(): Promise<{ port: number; probes: number }> {
  const state = { port: 0, probes: 0 };
  const server: Server = createServer((req, res) => {
    if (req.url === '/health') state.probes += 1;
    res.writeHead(200, { 'content-type': 'text/plain' }).end(`replica ${req.headers.host}\n`);
  });
  state.port = await listenUntilCleanup(server, () => server.closeAllConnections(), atCleanup);
  return state;
}

async function gatewayWith(tunnels: TunnelOptions | undefined, workers = 1): Promise<RunningGateway> {
  const options = { listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, adminToken: 'admin-token-for-tests-0123456789', tunnels };
  const gw = workers > 1 ? await startGatewayCluster(options, workers) : await startGateway(options);
  cleanups.push(() => gw.close(0));
  return gw;
}

/** The table of service `hid`: one replica at HIDDEN:port behind `via` (put through the admin API, as a run does). */
async function serve(gw: RunningGateway, port: number, via: ReplicaVia, probes = false, host = HIDDEN): Promise<void> {
  const res = await fetch(`${gw.adminUrl}/services/hid`, {
    method: 'PUT',
    headers: { authorization: 'Bearer admin-token-for-tests-0123456789', 'content-type': 'application/json' },
    body: JSON.stringify({
      run: 'hid',
      generation: 1,
      auth: null,
      current_revision: 0,
      revisions: [{ number: 0, entry: ['web'], groups: [{ name: 'web', replicas: [{ url: `http://${host}:${port}`, state: 'ready', via }] }] }],
      ...(probes ? { probes: [{ type: 'http', url: '/health', method: 'get', headers: [], body: null, timeout_s: 2, interval_s: 1, ready_after: 1, until_ready: false }] } : {}),
    }),
  });
  expect(res.status, await res.text()).toBeLessThan(300);
}

async function get(gw: RunningGateway, path = '/x'): Promise<{ status: number; body: string }> {
  const res = await fetch(`${gw.url}/services/hid${path}`, { signal: AbortSignal.timeout(10_000) });
  return { status: res.status, body: await res.text() };
}

/** A jump host that lets the gateway's key in, a replica behind it, a gateway with that key serving it. */
async function throughJump(probes: boolean, workers = 1): Promise<{ jump: Jump; up: { port: number; probes: number }; gw: RunningGateway }> {
  const key = clientKey(keyDir(), 'gateway');
  const jump = await jumpHost(key.publicSsh);
  const up = await replica();
  const gw = await gatewayWith({ identityFile: key.file }, workers);
  await serve(gw, up.port, { host: '127.0.0.1', port: jump.port, user: 'gw', host_key_fingerprints: [jump.fingerprint] }, probes);
  return { jump, up, gw };
}

describe('the gateway through a jump host', () => {
  it('answers through its own SSH connection, one for many requests, with the Host of the replica; probes go the same way', async () => {
    const { jump, up, gw } = await throughJump(true);
    const answers = await Promise.all(Array.from({ length: 8 }, () => get(gw)));
    expect(answers).toEqual(Array.from({ length: 8 }, () => ({ status: 200, body: `replica ${HIDDEN}:${up.port}\n` })));
    expect(jump.connections).toBe(1);
    expect(new Set(jump.channels.map((c) => `${c.host}:${c.port}`))).toEqual(new Set([`${HIDDEN}:${up.port}`]));
    const deadline = Date.now() + 5_000;
    while (up.probes === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(up.probes).toBeGreaterThan(0);
  });

  it('with --workers 2: each data-plane process through its own connection, the primary probing through its own', async () => {
    const { jump, up, gw } = await throughJump(true, 2);
    const answers = await Promise.all(Array.from({ length: 16 }, () => get(gw)));
    expect(answers.filter((a) => a.status !== 200)).toEqual([]);
    const deadline = Date.now() + 5_000;
    while (up.probes === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(up.probes).toBeGreaterThan(0);
    expect(jump.connections).toBeGreaterThanOrEqual(2);
    expect(jump.connections).toBeLessThanOrEqual(3);
  }, 30_000);

  it("with --workers 2, a rollout's gate A sent from the gateway (its primary) goes through the jump host, as its requests do", async () => {
    const { jump, up, gw } = await throughJump(false, 2);
    const res = await fetch(`${gw.adminUrl}/services/hid/check`, {
      method: 'POST',
      headers: { authorization: 'Bearer admin-token-for-tests-0123456789', 'content-type': 'application/json' },
      body: JSON.stringify({ revision: 0, request: { url: '/ready', method: 'get', headers: [], body: null, timeout_s: 5 } }),
    });
    const answer = (await res.json()) as { replicas: Array<{ url: string; status: number | null; error: string | null }> };
    expect(answer.replicas).toMatchObject([{ url: `http://${HIDDEN}:${up.port}`, status: 200, error: null }]);
    // HIDDEN is an address this machine has no route to: the answer came through the jump host.
    expect(jump.channels.map((c) => `${c.host}:${c.port}`)).toContain(`${HIDDEN}:${up.port}`);
  }, 30_000);

  it('connects again after the SSH connection drops', async () => {
    const { jump, up, gw } = await throughJump(false);
    expect((await get(gw)).status).toBe(200);
    jump.drop();
    await new Promise((r) => setTimeout(r, 200));
    // The pooled HTTP connection went with the SSH one: the next request opens both again.
    expect(await get(gw)).toEqual({ status: 200, body: `replica ${HIDDEN}:${up.port}\n` });
    expect(jump.connections).toBe(2);
  });

  it('502 with what to do: no key configured, a key the jump host refuses, a host key that is not the verified one, forwarding refused', async () => {
    const dir = keyDir();
    const key = clientKey(dir, 'gateway');
    const other = clientKey(dir, 'other');
    const jump = await jumpHost(key.publicSsh);
    const up = await replica();
    const via = { host: '127.0.0.1', port: jump.port, user: 'gw', host_key_fingerprints: [jump.fingerprint] };

    const bare = await gatewayWith(undefined);
    await serve(bare, up.port, via);
    const none = await get(bare);
    expect(none.status).toBe(502);
    expect(JSON.parse(none.body).error).toContain(`this gateway has no SSH key for it: start the gateway with --ssh-identity FILE, a key gw on that host authorizes`);

    const refused = await gatewayWith({ identityFile: other.file });
    await serve(refused, up.port, via);
    expect(JSON.parse((await get(refused)).body).error).toContain(`authentication failed: the server refused the key ${other.file} for user gw`);

    const spoofed = await gatewayWith({ identityFile: key.file });
    await serve(spoofed, up.port, { ...via, host_key_fingerprints: [FINGERPRINT] });
    const changed = await get(spoofed);
    expect(changed.status).toBe(502);
    expect(JSON.parse(changed.body).error).toContain(jump.fingerprint);

    const closed = await jumpHost(key.publicSsh, false);
    const gw = await gatewayWith({ identityFile: key.file });
    await serve(gw, up.port, { ...via, port: closed.port, host_key_fingerprints: [closed.fingerprint] });
    const prohibited = await get(gw);
    expect(prohibited.status).toBe(502);
    expect(JSON.parse(prohibited.body).error).toContain(`refuses to forward to ${HIDDEN}:${up.port}`);
  });
});

describe("the gateway to a replica on its host's private address (no proxy_jump)", () => {
  it('says what to configure when it has no key, naming the host', () => {
    const own: ReplicaVia = { ...VIA, direct_first: true };
    expect(ReplicaSchema.safeParse({ url: 'http://10.0.0.5:8000', state: 'ready', via: own }).success).toBe(true);
    expect(() => jumpTargetOf(own, {})).toThrow("this gateway has no route to the replica's private address, which its host ops@203.0.113.7:2222 reaches, and no SSH key for that host: start the gateway with --ssh-identity FILE");
  });

  it('goes straight where it has a route: no SSH connection is made', async () => {
    const key = clientKey(keyDir(), 'gateway');
    const host = await jumpHost(key.publicSsh);
    const up = await replica();
    const gw = await gatewayWith({ identityFile: key.file });
    await serve(gw, up.port, { host: '127.0.0.1', port: host.port, user: 'gw', host_key_fingerprints: [host.fingerprint], direct_first: true }, false, '127.0.0.1');
    expect(await get(gw)).toEqual({ status: 200, body: `replica 127.0.0.1:${up.port}\n` });
    expect(host.connections).toBe(0);
  });

  it('where it has none, goes through the host after one straight try, and stays on that way', async () => {
    const key = clientKey(keyDir(), 'gateway');
    const host = await jumpHost(key.publicSsh);
    const up = await replica();
    const gw = await gatewayWith({ identityFile: key.file });
    await serve(gw, up.port, { host: '127.0.0.1', port: host.port, user: 'gw', host_key_fingerprints: [host.fingerprint], direct_first: true });
    const first = await get(gw);
    expect(first).toEqual({ status: 200, body: `replica ${HIDDEN}:${up.port}\n` });
    const more = await Promise.all(Array.from({ length: 4 }, () => get(gw)));
    expect(more.every((a) => a.status === 200)).toBe(true);
    expect(host.connections).toBe(1);
    expect(new Set(host.channels.map((c) => `${c.host}:${c.port}`))).toEqual(new Set([`${HIDDEN}:${up.port}`]));
  });
});
