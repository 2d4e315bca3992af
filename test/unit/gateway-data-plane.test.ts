import cluster from 'node:cluster';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { defaultPublicUrl, startGateway, type RunningGateway } from '../../src/gateway/gateway';
import { startGatewayCluster } from '../../src/gateway/gateway-cluster';
import type { ServiceTableInput } from '../../src/gateway/routing-table';
import { tokenHash } from '../../src/gateway/token-auth';

/**
 * The gateway over real HTTP on 127.0.0.1: stand-in replicas (node:http) that mark every answer with
 * their name, a gateway in front, requests as a client sends them.
 */

const ADMIN_TOKEN = 'admin-token-for-tests-0123456789';
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface StandIn {
  name: string;
  url: string;
  /** Requests it saw: path and headers. */
  seen: Array<{ path: string; headers: IncomingMessage['headers'] }>;
  /** Lets the `/stream` answers in progress send their last chunk. */
  release(): void;
  server: Server;
  /** What `/health` (a probe) answers: 200, else 500. */
  healthy: boolean;
  /** The probes it saw: method, Authorization and body. */
  probes: Array<{ method: string; auth: string | undefined; body: string }>;
}

async function listening(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/**
 * A replica: `/stream` answers chunked, `first <name>\n` at once and `last <name>\n` after release();
 * `/echo` answers the request's body; `/hang` never answers; `/health` as `healthy` says (not in `seen`);
 * `/headers` answers two Set-Cookie lines and a header its Connection names (hop-by-hop);
 * anything else `{"name", "path"}`.
 */
async function standIn(name: string): Promise<StandIn> {
  const waiting: Array<() => void> = [];
  const seen: StandIn['seen'] = [];
  const server = createServer((req, res) => {
    if (req.url === '/health') {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        self.probes.push({ method: req.method ?? '', auth: req.headers.authorization, body });
        res.writeHead(self.healthy ? 200 : 500).end();
      });
      return;
    }
    seen.push({ path: req.url ?? '', headers: req.headers });
    if (req.url === '/stream' || req.url?.endsWith('/stream')) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'x-replica': name });
      res.write(`first ${name}\n`);
      waiting.push(() => res.end(`last ${name}\n`));
      return;
    }
    if (req.url === '/hang') return;
    if (req.url === '/headers') {
      res.writeHead(200, [['Set-Cookie', 'a=1'], ['Set-Cookie', 'b=2'], ['Connection', 'keep-alive, X-Hop'], ['X-Hop', 'gone'], ['X-Replica', name], ['Content-Length', '2']]);
      res.end('ok');
      return;
    }
    if (req.url === '/echo') {
      res.writeHead(200, { 'x-replica': name });
      req.pipe(res);
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'x-replica': name, connection: 'keep-alive' });
    res.end(JSON.stringify({ name, path: req.url }));
  });
  const url = await listening(server);
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const self: StandIn = { name, url, seen, server, release: () => waiting.splice(0).forEach((f) => f()), healthy: true, probes: [] };
  return self;
}

/** A port nothing listens on. */
async function deadUrl(): Promise<string> {
  const server = createServer();
  const url = await listening(server);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return url;
}

async function gateway(options: { domain?: string; stateFile?: string; publicUrl?: string; workers?: number } = {}): Promise<RunningGateway> {
  const { workers = 1, ...rest } = options;
  const gatewayOptions = { listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, adminToken: ADMIN_TOKEN, ...rest };
  const gw = workers > 1 ? await startGatewayCluster(gatewayOptions, workers) : await startGateway(gatewayOptions);
  cleanups.push(() => gw.close());
  return gw;
}

function table(run: string, replicas: Array<{ url: string; state?: 'ready' | 'draining' }>, extra: Partial<ServiceTableInput> = {}): ServiceTableInput {
  return {
    run,
    generation: 0,
    auth: null,
    current_revision: 0,
    revisions: [{ number: 0, entry: ['main'], groups: [{ name: 'main', replicas: replicas.map((r) => ({ url: r.url, state: r.state ?? 'ready' })) }] }],
    ...extra,
  };
}

async function admin(gw: RunningGateway, method: string, path: string, body?: unknown, token: string | null = ADMIN_TOKEN): Promise<{ status: number; text: string }> {
  const res = await fetch(`${gw.adminUrl}${path}`, {
    method,
    headers: { ...(token !== null ? { authorization: `Bearer ${token}` } : {}), 'content-type': 'application/json' },
    ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
  });
  return { status: res.status, text: await res.text() };
}

async function put(gw: RunningGateway, t: ServiceTableInput): Promise<void> {
  const res = await admin(gw, 'PUT', `/services/${t.run}`, t);
  expect(res.status, res.text).toBe(200);
}

async function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string; replica: string | null; headers: Headers }> {
  const res = await fetch(url, { headers });
  return { status: res.status, body: await res.text(), replica: res.headers.get('x-replica'), headers: res.headers };
}

/** A GET on a connection of its own: a clustered gateway hands each new connection to its next worker. */
function onNewConnection(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    httpRequest(url, { agent: false, headers }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
}

/** A GET read chunk by chunk: resolves the first chunk as soon as it arrives, and the rest at the end. */
function streamed(url: string): { first: Promise<string>; all: Promise<string> } {
  let gotFirst: (s: string) => void = () => undefined;
  const first = new Promise<string>((resolve) => (gotFirst = resolve));
  const all = new Promise<string>((resolve, reject) => {
    httpRequest(url, (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => {
        if (text === '') gotFirst(chunk.toString());
        text += chunk.toString();
      });
      res.on('end', () => resolve(text));
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
  return { first, all };
}

describe('the gateway routes', () => {
  it('by path and by Host, stripping the prefix or not', async () => {
    const [a, b] = await Promise.all([standIn('a1'), standIn('b1')]);
    const gw = await gateway({ domain: 'svc.test' });
    await put(gw, table('alpha', [{ url: a.url }]));
    await put(gw, table('beta', [{ url: b.url }], { strip_prefix: false }));

    const byPath = await get(`${gw.url}/services/alpha/v1/models?x=1`);
    expect(byPath.status).toBe(200);
    expect(JSON.parse(byPath.body)).toEqual({ name: 'a1', path: '/v1/models?x=1' });
    expect(a.seen.at(-1)?.headers['x-forwarded-prefix']).toBe('/services/alpha');
    expect(JSON.parse((await get(`${gw.url}/services/alpha`)).body)).toEqual({ name: 'a1', path: '/' });
    expect(JSON.parse((await get(`${gw.url}/services/beta/v1/models`)).body)).toEqual({ name: 'b1', path: '/services/beta/v1/models' });

    const port = new URL(gw.url).port;
    const byHost = await new Promise<string>((resolve, reject) => {
      httpRequest(`${gw.url}/v1/chat`, { headers: { host: `beta.svc.test:${port}` } }, (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve(text));
      })
        .on('error', reject)
        .end();
    });
    expect(JSON.parse(byHost)).toEqual({ name: 'b1', path: '/v1/chat' });

    const unknown = await get(`${gw.url}/services/gamma/`);
    expect(unknown.status).toBe(404);
    expect(unknown.body).toContain('gamma');
  });

  it("passes the replica's answer headers on, repeated ones as they came, without the hop-by-hop ones", async () => {
    const a = await standIn('a');
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: a.url }]));
    const res = await get(`${gw.url}/services/alpha/headers`);
    expect(res.status).toBe(200);
    expect(res.body).toBe('ok');
    expect(res.headers.getSetCookie()).toEqual(['a=1', 'b=2']);
    expect(res.headers.get('x-hop')).toBeNull();
    expect(res.headers.get('x-replica')).toBe('a');
    expect(res.headers.get('content-length')).toBe('2');
    expect(res.headers.get('troupe-revision')).toBe('0');
  });

  it('streams a request body to the replica and its answer back', async () => {
    const a = await standIn('a1');
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: a.url }]));
    const res = await fetch(`${gw.url}/services/alpha/echo`, { method: 'POST', body: 'x'.repeat(300_000) });
    expect(res.status).toBe(200);
    expect((await res.text()).length).toBe(300_000);
  });
});

describe('a service with auth', () => {
  it('answers 401 without a token, 403 with a wrong one, and passes the right one on', async () => {
    const a = await standIn('a1');
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: a.url }], { auth: { token_sha256: [tokenHash('other'), tokenHash('s3cret')] } }));
    const none = await get(`${gw.url}/services/alpha/x`);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer');
    expect((await get(`${gw.url}/services/alpha/x`, { authorization: 'Bearer nope' })).status).toBe(403);
    const ok = await get(`${gw.url}/services/alpha/x`, { authorization: 'Bearer s3cret' });
    expect(ok.status).toBe(200);
    expect(a.seen).toHaveLength(1);
    // Kept, as nginx's auth_request (dstack's gateway) keeps it: a model server may check it too.
    expect(a.seen[0]?.headers.authorization).toBe('Bearer s3cret');
  });

  it('on one keep-alive connection, checks each request\'s token and checks again under a new table', async () => {
    const a = await standIn('a1');
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: a.url }], { auth: { token_sha256: [tokenHash('s3cret')] } }));
    const one = new Client(gw.url, { pipelining: 1 });
    cleanups.push(() => one.close());
    const status = async (authorization?: string) => {
      const res = await one.request({ path: '/services/alpha/x', method: 'GET', headers: authorization !== undefined ? { authorization } : {} });
      await res.body.text();
      return res.statusCode;
    };
    expect(await status('Bearer s3cret')).toBe(200);
    expect(await status('Bearer nope')).toBe(403);
    expect(await status()).toBe(401);
    expect(await status('Bearer s3cret')).toBe(200);
    await put(gw, table('alpha', [{ url: a.url }], { auth: { token_sha256: [tokenHash('n3w')] } }));
    expect(await status('Bearer s3cret')).toBe(403);
    expect(await status('Bearer n3w')).toBe(200);
    expect(a.seen.filter((r) => r.path === '/x')).toHaveLength(3);
  });
});

describe('rate limits', () => {
  it('answer 429 with Retry-After past the burst, and let requests through again once the bucket refills', async () => {
    const a = await standIn('a1');
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: a.url }], { rate_limits: [{ prefix: '/', rps: 1000 }, { prefix: '/v1/chat', rps: 5, burst: 1 }] }));
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await get(`${gw.url}/services/alpha/v1/chat/completions`)).status);
    expect(statuses).toEqual([200, 200, 429]);
    const limited = await get(`${gw.url}/services/alpha/v1/chat/completions`);
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('1');
    // Other prefixes have their own, longer-prefix-first.
    expect((await get(`${gw.url}/services/alpha/v1/models`)).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 260));
    expect((await get(`${gw.url}/services/alpha/v1/chat/completions`)).status).toBe(200);
  });
});

describe('replicas', () => {
  it('only ready replicas of the entry group get requests; none ready is a 503 with a reason', async () => {
    const [r1, r2, router] = await Promise.all([standIn('r1'), standIn('r2'), standIn('router')]);
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: r1.url }, { url: r2.url, state: 'draining' }]));
    const names = new Set<string | null>();
    for (let i = 0; i < 8; i++) names.add((await get(`${gw.url}/services/alpha/`)).replica);
    expect([...names]).toEqual(['r1']);

    // With a router group, only the router is entered.
    await put(gw, {
      ...table('alpha', []),
      revisions: [{ number: 0, entry: ['router'], groups: [{ name: 'router', replicas: [{ url: router.url, state: 'ready' }] }, { name: 'decode', replicas: [{ url: r1.url, state: 'ready' }] }] }],
    });
    for (let i = 0; i < 4; i++) expect((await get(`${gw.url}/services/alpha/`)).replica).toBe('router');

    await put(gw, table('alpha', [{ url: r1.url, state: 'draining' }]));
    const none = await get(`${gw.url}/services/alpha/`);
    expect(none.status).toBe(503);
    expect(none.body.trim().split('\n')).toHaveLength(1);
    expect(JSON.parse(none.body).error).toMatch(/no ready replica in group "main" of revision 0/);
  });

  it('spreads requests over ready replicas', async () => {
    const [r1, r2] = await Promise.all([standIn('r1'), standIn('r2')]);
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: r1.url }, { url: r2.url }]));
    const names = [];
    for (let i = 0; i < 6; i++) names.push((await get(`${gw.url}/services/alpha/`)).replica);
    expect(names.filter((n) => n === 'r1').length).toBe(3);
  });

  it('a draining replica gets no new request while its streaming answer in flight completes', async () => {
    const [r1, r2] = await Promise.all([standIn('r1'), standIn('r2')]);
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: r1.url }]));
    const stream = streamed(`${gw.url}/services/alpha/stream`);
    expect(await stream.first).toBe('first r1\n');

    await put(gw, { ...table('alpha', [{ url: r2.url }]), current_revision: 1, revisions: [
      { number: 0, entry: ['main'], groups: [{ name: 'main', replicas: [{ url: r1.url, state: 'draining' }] }] },
      { number: 1, entry: ['main'], groups: [{ name: 'main', replicas: [{ url: r2.url, state: 'ready' }] }] },
    ] });
    for (let i = 0; i < 4; i++) expect((await get(`${gw.url}/services/alpha/`)).replica).toBe('r2');
    const inflight = JSON.parse((await admin(gw, 'GET', '/services/alpha/inflight')).text) as { replicas: Array<{ url: string; inflight: number; state: string }> };
    expect(inflight.replicas.find((r) => r.url === r1.url)).toMatchObject({ inflight: 1, state: 'draining' });
    expect(inflight.replicas.find((r) => r.url === r2.url)).toMatchObject({ inflight: 0, state: 'ready' });

    r1.release();
    expect(await stream.all).toBe('first r1\nlast r1\n');
    const after = JSON.parse((await admin(gw, 'GET', '/services/alpha/inflight')).text) as { replicas: Array<{ url: string; inflight: number }> };
    expect(after.replicas.find((r) => r.url === r1.url)?.inflight).toBe(0);
  });

  it('a client that goes away cancels the request to the replica, mid-stream or before its headers', async () => {
    const r1 = await standIn('r1');
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: r1.url }]));
    for (const path of ['/stream', '/hang']) {
      const upstreamClosed = new Promise<void>((resolve) => r1.server.once('request', (req: IncomingMessage) => req.socket.once('close', () => resolve())));
      const req = httpRequest(`${gw.url}/services/alpha${path}`);
      req.on('error', () => undefined);
      req.end();
      if (path === '/stream') await new Promise<void>((resolve) => req.on('response', (res) => res.once('data', () => resolve())));
      else await expect.poll(() => r1.seen.filter((s) => s.path === '/hang').length).toBe(1);
      req.destroy();
      await upstreamClosed;
      await expect.poll(async () => JSON.parse((await admin(gw, 'GET', '/services/alpha/inflight')).text).replicas[0].inflight).toBe(0);
    }
  });

  it('a connect error on one replica is tried once on another', async () => {
    const [dead, r2] = await Promise.all([deadUrl(), standIn('r2')]);
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: dead }, { url: r2.url }]));
    for (let i = 0; i < 6; i++) {
      const res = await fetch(`${gw.url}/services/alpha/echo`, { method: 'POST', body: `body ${i}` });
      expect(res.status).toBe(200);
      expect(await res.text()).toBe(`body ${i}`);
    }
    await put(gw, table('alpha', [{ url: dead }]));
    const failed = await get(`${gw.url}/services/alpha/`);
    expect(failed.status).toBe(502);
    expect(failed.body).toContain('ECONNREFUSED');
  });

  it('a chunked answer arrives in pieces, not buffered', async () => {
    const r1 = await standIn('r1');
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: r1.url }]));
    const stream = streamed(`${gw.url}/services/alpha/stream`);
    // The replica has not sent its last chunk: the first one came through on its own.
    expect(await stream.first).toBe('first r1\n');
    r1.release();
    expect(await stream.all).toBe('first r1\nlast r1\n');
  });
});

describe('two gateways and a restart', () => {
  it('keeps serving from --state after a restart; two gateways serve the same service', async () => {
    const r1 = await standIn('r1');
    const dir = mkdtempSync(join(tmpdir(), 'troupe-gateway-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const stateFile = join(dir, 'state.json');
    const first = await startGateway({ listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, adminToken: ADMIN_TOKEN, stateFile });
    await put(first, table('alpha', [{ url: r1.url }], { auth: { token_sha256: [tokenHash('s3cret')] } }));
    expect(statSync(stateFile).mode & 0o777).toBe(0o600);
    await first.close();

    const again = await gateway({ stateFile });
    const other = await gateway();
    await put(other, table('alpha', [{ url: r1.url }]));
    expect((await get(`${again.url}/services/alpha/`, { authorization: 'Bearer s3cret' })).replica).toBe('r1');
    expect((await get(`${again.url}/services/alpha/`)).status).toBe(401);
    expect((await get(`${other.url}/services/alpha/`)).replica).toBe('r1');
  });
});

describe('the admin API', () => {
  it('refuses without its token, refuses a bad table keeping the old one, and lists no hashes', async () => {
    const r1 = await standIn('r1');
    const gw = await gateway();
    expect((await admin(gw, 'GET', '/services', undefined, null)).status).toBe(401);
    expect((await admin(gw, 'PUT', '/services/alpha', table('alpha', [{ url: r1.url }]), 'wrong-token')).status).toBe(403);
    expect((await admin(gw, 'GET', '/metrics', undefined, null)).status).toBe(401);

    await put(gw, table('alpha', [{ url: r1.url }], { auth: { token_sha256: [tokenHash('s3cret')] } }));
    const bad = await admin(gw, 'PUT', '/services/alpha', { ...table('alpha', [{ url: 'ftp://x' }]), current_revision: 7 });
    expect(bad.status).toBe(400);
    expect(bad.text).toMatch(/url: expected an http\(s\) origin/);
    expect(bad.text).toMatch(/current_revision: revision 7 is not among the revisions/);
    expect((await admin(gw, 'PUT', '/services/alpha', '{not json')).status).toBe(400);
    expect((await admin(gw, 'PUT', '/services/beta', table('alpha', [{ url: r1.url }]))).status).toBe(400);
    expect((await get(`${gw.url}/services/alpha/`, { authorization: 'Bearer s3cret' })).replica).toBe('r1');

    const listed = await admin(gw, 'GET', '/services');
    expect(listed.text).not.toContain(tokenHash('s3cret'));
    expect(JSON.parse(listed.text).services[0]).toMatchObject({ run: 'alpha', auth: { tokens: 1 } });

    expect((await admin(gw, 'DELETE', '/services/alpha')).status).toBe(200);
    expect((await get(`${gw.url}/services/alpha/`)).status).toBe(404);
  });

  it('refuses a lower generation than the one it holds (409, table kept), replaces an equal one', async () => {
    const [r1, r2, r3] = await Promise.all([standIn('r1'), standIn('r2'), standIn('r3')]);
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: r1.url }], { generation: 2 }));
    const stale = await admin(gw, 'PUT', '/services/alpha', table('alpha', [{ url: r2.url }], { generation: 1 }));
    expect(stale.status).toBe(409);
    expect(JSON.parse(stale.text)).toEqual({ error: 'stale: generation 1 < held 2' });
    expect((await get(`${gw.url}/services/alpha/`)).replica).toBe('r1');
    await put(gw, table('alpha', [{ url: r3.url }], { generation: 2 }));
    expect((await get(`${gw.url}/services/alpha/`)).replica).toBe('r3');
    // Deleted, the run's generations start again: a new run of the same name begins at 0.
    expect((await admin(gw, 'DELETE', '/services/alpha')).status).toBe(200);
    await put(gw, table('alpha', [{ url: r2.url }], { generation: 0 }));
    expect((await get(`${gw.url}/services/alpha/`)).replica).toBe('r2');
    const missing = await admin(gw, 'PUT', '/services/alpha', { ...table('alpha', [{ url: r2.url }]), generation: undefined });
    expect(missing.status).toBe(400);
    expect(missing.text).toMatch(/generation: /);
  });

  it('GET /info says where the data plane is and its domain, to the admin token only', async () => {
    const plain = await gateway();
    expect(JSON.parse((await admin(plain, 'GET', '/info')).text)).toEqual({ data_plane_url: plain.url, domain: null });
    expect((await admin(plain, 'GET', '/info', undefined, null)).status).toBe(401);
    const named = await gateway({ domain: 'svc.test' });
    expect(JSON.parse((await admin(named, 'GET', '/info')).text)).toEqual({ data_plane_url: named.url, domain: 'svc.test' });
    const public_ = await gateway({ publicUrl: 'https://gw.example.com' });
    expect(public_.publicUrl).toBe('https://gw.example.com');
    expect(JSON.parse((await admin(public_, 'GET', '/info')).text)).toEqual({ data_plane_url: 'https://gw.example.com', domain: null });
  });

  it('reports a gateway listening on every interface at the loopback, not at 0.0.0.0 or ::', () => {
    expect(defaultPublicUrl('http://0.0.0.0:8080')).toBe('http://127.0.0.1:8080');
    expect(defaultPublicUrl('http://[::]:8080')).toBe('http://127.0.0.1:8080');
    expect(defaultPublicUrl('http://10.0.0.5:8080')).toBe('http://10.0.0.5:8080');
    expect(defaultPublicUrl('http://[::1]:8080')).toBe('http://[::1]:8080');
  });

  it('exports requests per service, group and replica', async () => {
    const [r1, r2] = await Promise.all([standIn('r1'), standIn('r2')]);
    const gw = await gateway();
    await put(gw, table('alpha', [{ url: r1.url }, { url: r2.url }]));
    for (let i = 0; i < 4; i++) await get(`${gw.url}/services/alpha/`);
    const stream = streamed(`${gw.url}/services/alpha/stream`);
    await stream.first;
    const streaming = r1.seen.some((s) => s.path === '/stream') ? r1 : r2;
    const during = (await admin(gw, 'GET', '/metrics')).text;
    expect(during).toContain(`troupe_gateway_inflight_requests{service="alpha",revision="0",group="main",replica="${streaming.url}"} 1`);
    streaming.release();
    await stream.all;
    await put(gw, table('alpha', []));
    await get(`${gw.url}/services/alpha/`);
    const metrics = (await admin(gw, 'GET', '/metrics')).text;
    for (const r of [r1, r2]) {
      expect(metrics).toContain(`troupe_gateway_requests_total{service="alpha",revision="0",group="main",replica="${r.url}",code="200"} ${r === streaming ? 3 : 2}`);
      expect(metrics).toContain(`troupe_gateway_request_duration_seconds_count{service="alpha",revision="0",group="main",replica="${r.url}"} ${r === streaming ? 3 : 2}`);
      expect(metrics).toContain(`troupe_gateway_inflight_requests{service="alpha",revision="0",group="main",replica="${r.url}"} 0`);
    }
    expect(metrics).toContain('troupe_gateway_errors_total{service="alpha",revision="0",group="",replica="",reason="no_ready_replica"} 1');
  });
});

describe('the admin API: a rollout\'s gate A sent from the gateway (POST /services/<run>/check)', () => {
  const HEALTH_PROBE = { url: '/health', method: 'post', headers: [{ name: 'authorization', value: 'Bearer probe' }], body: '{"q":1}', timeout_s: 2 };
  /** Revision 0 served by `current`, revision 1 (no traffic yet) by `fresh`, entry group `router`. */
  const twoRevisions = (current: StandIn[], fresh: StandIn[], draining: StandIn[] = []): ServiceTableInput => ({
    run: 'alpha',
    generation: 7,
    auth: null,
    current_revision: 0,
    revisions: [
      { number: 0, entry: ['router'], groups: [{ name: 'router', replicas: current.map((r) => ({ url: r.url, state: 'ready' as const })) }] },
      {
        number: 1,
        entry: ['router'],
        groups: [
          { name: 'router', replicas: [...fresh.map((r) => ({ url: r.url, state: 'ready' as const })), ...draining.map((r) => ({ url: r.url, state: 'draining' as const }))] },
          { name: 'decode', replicas: [] },
        ],
      },
    ],
  });
  const check = (gw: RunningGateway, body: unknown, run = 'alpha', token: string | null = ADMIN_TOKEN) => admin(gw, 'POST', `/services/${run}/check`, body, token);

  it("sends the request to each ready entry replica of the revision, as written, and answers each one's status; nothing counts in the service's figures or metrics", async () => {
    const [old, a, b, gone] = await Promise.all([standIn('old'), standIn('a'), standIn('b'), standIn('gone')]);
    b.healthy = false;
    const gw = await gateway();
    await put(gw, twoRevisions([old], [a, b], [gone]));
    const res = await check(gw, { revision: 1, request: HEALTH_PROBE });
    expect(res.status, res.text).toBe(200);
    const answer = JSON.parse(res.text) as { run: string; generation: number; revision: number; replicas: Array<{ url: string; status: number | null; ms: number | null; error: string | null }> };
    expect(answer).toMatchObject({ run: 'alpha', generation: 7, revision: 1 });
    // A 2xx is a pass, a 500 a failure: the caller judges; a draining replica and the old revision are not asked.
    expect(answer.replicas.map(({ url, status, error }) => ({ url, status, error }))).toEqual([
      { url: a.url, status: 200, error: null },
      { url: b.url, status: 500, error: null },
    ]);
    expect(answer.replicas.every((r) => typeof r.ms === 'number')).toBe(true);
    for (const r of [a, b]) expect(r.probes).toEqual([{ method: 'POST', auth: 'Bearer probe', body: '{"q":1}' }]);
    expect(old.probes).toEqual([]);
    expect(gone.probes).toEqual([]);
    // Out of the figures (gate B, autoscaling), the in-flight counts (drains) and the metrics.
    const figures = JSON.parse((await admin(gw, 'GET', '/services/alpha/figures?window=60')).text) as { revisions: Array<{ revision: number; requests: number }>; groups: Array<{ requests: number }> };
    expect(figures.revisions.map((r) => r.requests)).toEqual([0, 0]);
    expect(figures.groups.map((g) => g.requests)).toEqual([0, 0]);
    expect((await admin(gw, 'GET', '/metrics')).text).not.toMatch(/troupe_gateway_requests_total\{service="alpha"/);
    expect(JSON.parse((await admin(gw, 'GET', '/services/alpha/inflight')).text).replicas.every((r: { inflight: number }) => r.inflight === 0)).toBe(true);
  });

  it('answers a replica that does not answer with its error, within the timeout', async () => {
    const [dead, hang] = await Promise.all([deadUrl(), standIn('hang')]);
    const gw = await gateway();
    await put(gw, { ...table('alpha', [{ url: dead }]), revisions: [{ number: 0, entry: ['main'], groups: [{ name: 'main', replicas: [{ url: dead, state: 'ready' }, { url: hang.url, state: 'ready' }] }] }] });
    const started = Date.now();
    const res = await check(gw, { revision: 0, request: { url: '/hang', method: 'get', headers: [], body: null, timeout_s: 1 } });
    expect(Date.now() - started).toBeLessThan(5_000);
    const replicas = (JSON.parse(res.text) as { replicas: Array<{ url: string; status: number | null; error: string | null }> }).replicas;
    expect(replicas[0]).toMatchObject({ url: dead, status: null, ms: null, error: expect.stringContaining('ECONNREFUSED') });
    expect(replicas[1]).toMatchObject({ url: hang.url, status: null, ms: null, error: 'The operation was aborted due to timeout' });
  });

  it('404 for a run it has no table of, 409 for a revision not in its table or with no ready entry replica, 400 for a bad body, 401 without the token', async () => {
    const [old, gone] = await Promise.all([standIn('old'), standIn('gone')]);
    const gw = await gateway();
    await put(gw, twoRevisions([old], [], [gone]));
    const request = { url: '/', method: 'get', headers: [], body: null, timeout_s: 5 };
    expect(await check(gw, { revision: 1, request }, 'beta')).toEqual({ status: 404, text: `${JSON.stringify({ error: 'no service "beta" on this gateway' })}\n` });
    const missing = await check(gw, { revision: 3, request });
    expect(missing.status).toBe(409);
    expect(JSON.parse(missing.text)).toEqual({ error: "revision 3 not in this gateway's table (generation 7)" });
    const none = await check(gw, { revision: 1, request });
    expect(none.status).toBe(409);
    expect(JSON.parse(none.text)).toEqual({ error: "revision 1 has no ready entry replica in this gateway's table (generation 7)" });
    const bad = await check(gw, { revision: -1, request: { ...request, url: 'http://elsewhere/', timeout_s: 0 } });
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.text).error).toMatch(/^bad check: revision: .*; request\.url: a URL path: starts with \/.*; request\.timeout_s: /);
    expect(JSON.parse((await check(gw, 'null')).text)).toEqual({ error: 'bad check: (body): Invalid input: expected object, received null' });
    expect((await check(gw, '{not json')).status).toBe(400);
    expect((await check(gw, { revision: 0, request }, 'alpha', null)).status).toBe(401);
    expect((await check(gw, { revision: 0, request }, 'alpha', 'wrong-token')).status).toBe(403);
    expect(old.probes).toEqual([]);
  });
});

describe('a clustered gateway (--workers 2): one set of tables, limits, counts and metrics', () => {
  it('serves on every worker, with 401, 503, the generation check and strip_prefix as one process does', async () => {
    const a = await standIn('a1');
    const gw = await gateway({ workers: 2 });
    await put(gw, { ...table('alpha', [{ url: a.url }]), generation: 2 });
    const answers = await Promise.all(Array.from({ length: 6 }, () => onNewConnection(`${gw.url}/services/alpha/v1/x`)));
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(a.seen.map((r) => r.path)).toEqual(Array.from({ length: 6 }, () => '/v1/x'));
    const metrics = (await admin(gw, 'GET', '/metrics')).text;
    // Added up over the workers: each served some of the six.
    expect(metrics).toContain(`troupe_gateway_requests_total{service="alpha",revision="0",group="main",replica="${a.url}",code="200"} 6`);
    expect(metrics).toContain(`troupe_gateway_request_duration_seconds_count{service="alpha",revision="0",group="main",replica="${a.url}"} 6`);

    expect((await admin(gw, 'PUT', '/services/alpha', { ...table('alpha', []), generation: 1 })).status).toBe(409);
    await put(gw, { ...table('alpha', []), generation: 3 });
    // Answered once every worker serves it: no worker still sends to the replica taken out.
    const none = await Promise.all(Array.from({ length: 4 }, () => onNewConnection(`${gw.url}/services/alpha/`)));
    expect(none.map((r) => r.status)).toEqual([503, 503, 503, 503]);
    expect(JSON.parse(none[0]?.body ?? '{}')).toEqual({ error: 'no ready replica in group "main" of revision 0 of service "alpha"' });

    await put(gw, table('beta', [{ url: a.url }], { auth: { token_sha256: [tokenHash('s3cret')] } }));
    const auth = await Promise.all([onNewConnection(`${gw.url}/services/beta/`), onNewConnection(`${gw.url}/services/beta/`, { authorization: 'Bearer s3cret' })]);
    expect(auth.map((r) => r.status)).toEqual([401, 200]);
  });

  it('holds a rate limit across the workers: their buckets are the primary\'s', async () => {
    const a = await standIn('a1');
    const gw = await gateway({ workers: 2 });
    await put(gw, table('alpha', [{ url: a.url }], { rate_limits: [{ prefix: '/', rps: 0.1, burst: 1 }] }));
    const statuses: number[] = [];
    // One after another, each on a new connection: the workers take them in turn.
    for (let i = 0; i < 4; i++) statuses.push((await onNewConnection(`${gw.url}/services/alpha/`)).status);
    expect(statuses).toEqual([200, 200, 429, 429]);
  });

  it('counts the requests in flight over every worker, for a drain to wait on', async () => {
    const r1 = await standIn('r1');
    const gw = await gateway({ workers: 2 });
    await put(gw, table('alpha', [{ url: r1.url }]));
    const streams = [streamed(`${gw.url}/services/alpha/stream`), streamed(`${gw.url}/services/alpha/stream`)];
    await Promise.all(streams.map((s) => s.first));
    const rows = async () => JSON.parse((await admin(gw, 'GET', '/services/alpha/inflight')).text) as { replicas: Array<{ url: string; inflight: number; state: string }> };
    expect((await rows()).replicas).toEqual([{ revision: 0, group: 'main', url: r1.url, state: 'ready', inflight: 2 }]);
    expect((await admin(gw, 'GET', '/metrics')).text).toContain(`troupe_gateway_inflight_requests{service="alpha",revision="0",group="main",replica="${r1.url}"} 2`);
    r1.release();
    await Promise.all(streams.map((s) => s.all));
    expect((await rows()).replicas[0]?.inflight).toBe(0);
  });

  it('replaces a worker killed with SIGKILL, with the tables', async () => {
    const a = await standIn('a1');
    const gw = await gateway({ workers: 2 });
    await put(gw, table('alpha', [{ url: a.url }]));
    const [victim] = Object.values(cluster.workers ?? {});
    const pid = victim?.process.pid;
    victim?.process.kill('SIGKILL');
    await expect.poll(() => Object.values(cluster.workers ?? {}).filter((w) => w?.process.pid !== pid && !w?.isDead()).length, { timeout: 15_000 }).toBe(2);
    await expect.poll(async () => (await Promise.all(Array.from({ length: 4 }, () => onNewConnection(`${gw.url}/services/alpha/`)))).map((r) => r.status), { timeout: 15_000 }).toEqual([200, 200, 200, 200]);
  });
});

describe.each([1, 2])('probes after READY (workers: %i)', (workers) => {
  const health = { type: 'http' as const, url: '/health', method: 'post' as const, headers: [{ name: 'Authorization', value: 'Bearer probe' }], body: '{"ping": 1}', timeout_s: 1, interval_s: 1, ready_after: 2, until_ready: false };
  const names = async (gw: RunningGateway, n: number) =>
    (await Promise.all(Array.from({ length: n }, () => onNewConnection(`${gw.url}/services/web/x`)))).map((r) => (r.status === 200 ? (JSON.parse(r.body) as { name: string }).name : String(r.status)));
  const metrics = async (gw: RunningGateway) => (await admin(gw, 'GET', '/metrics')).text;

  it('a replica whose probe fails gets no new request and none fails; it gets them again after ready_after passes', async () => {
    const [a, b] = await Promise.all([standIn('a'), standIn('b')]);
    const gw = await gateway({ workers });
    await put(gw, table('web', [{ url: a.url }, { url: b.url }], { probes: [health] }));
    // Probed as written: method, headers, body.
    await expect.poll(() => b.probes.length, { timeout: 5_000 }).toBeGreaterThan(0);
    expect(b.probes[0]).toEqual({ method: 'POST', auth: 'Bearer probe', body: '{"ping": 1}' });
    expect(new Set(await names(gw, 8))).toEqual(new Set(['a', 'b']));

    b.healthy = false;
    // Out once a probe has failed, in every worker.
    await expect.poll(() => metrics(gw), { timeout: 5_000 }).toContain('troupe_gateway_replicas_probes_failing{service="web",revision="0",group="main"} 1');
    const servedBefore = b.seen.length;
    expect(await names(gw, 20)).toEqual(Array.from({ length: 20 }, () => 'a'));
    expect(b.seen.length).toBe(servedBefore);
    expect(await metrics(gw)).toMatch(new RegExp(`troupe_gateway_probe_failures_total\\{service="web",revision="0",group="main",replica="${b.url}"\\} [1-9]`));

    // a fails too: none passes, so both are chosen all the same (a panic: probes alone never refuse every request).
    a.healthy = false;
    await expect.poll(() => metrics(gw), { timeout: 5_000 }).toContain('troupe_gateway_replicas_probes_failing{service="web",revision="0",group="main"} 2');
    expect(new Set(await names(gw, 8))).toEqual(new Set(['a', 'b']));

    // b passes again: back after two passes in a row.
    const passedFrom = b.probes.length;
    b.healthy = true;
    await expect.poll(() => names(gw, 4), { timeout: 8_000 }).toEqual(['b', 'b', 'b', 'b']);
    expect(b.probes.length - passedFrom).toBeGreaterThanOrEqual(2);
    a.healthy = true;
    await expect.poll(async () => new Set(await names(gw, 8)), { timeout: 8_000 }).toEqual(new Set(['a', 'b']));
    await expect.poll(() => metrics(gw), { timeout: 5_000 }).toContain('troupe_gateway_replicas_probes_failing{service="web",revision="0",group="main"} 0');

    // The service deleted: its probes stop.
    expect((await admin(gw, 'DELETE', '/services/web')).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const probed = a.probes.length + b.probes.length;
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(a.probes.length + b.probes.length).toBe(probed);
  }, 40_000);
});
