import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { createGatewayRouteActivities } from '../../activities/gateway-routes';
import { createSyntheticRequestActivities } from '../../activities/synthetic-request';
import type { CheckRevisionInput, CheckRevisionResult, DrainReplicasResult, PushServiceTableResult } from '../../activities/types';
import { gatewayInfo, GatewayAdminError, type GatewayAdmin } from '../../src/gateway/admin-client';
import { startGateway, type RunningGateway } from '../../src/gateway/gateway';
import type { ServiceTableInput } from '../../src/gateway/routing-table';
import { listenLocal } from '../helpers/local-server';

/**
 * The worker's side of the gateway: the push and remove activities and gate A's check (in the SDK's
 * MockActivityEnvironment, no Temporal server) against real gateways and a real upstream on 127.0.0.1.
 */

const ADMIN_TOKEN = 'push-test-admin-token-0123456789';
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Every failure message a test saw, checked for the token at the end of each test. */
const messages: string[] = [];
afterEach(() => {
  for (const message of messages.splice(0)) expect(message).not.toContain(ADMIN_TOKEN);
});

async function listening(server: Server): Promise<string> {
  const { url, close } = await listenLocal(server);
  cleanups.push(close);
  return url;
}

/** An upstream replica that answers `upstream <path>`. */
async function upstream(): Promise<string> {
  return listening(createServer((req, res) => res.end(`upstream ${req.url}`)));
}

async function gateway(domain?: string): Promise<RunningGateway> {
  const gw = await startGateway({ listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, adminToken: ADMIN_TOKEN, domain });
  cleanups.push(() => gw.close(0));
  return gw;
}

const admin = (gw: RunningGateway, token = ADMIN_TOKEN): GatewayAdmin => ({ url: gw.adminUrl, token });

/** An admin URL nothing listens on. */
async function deadAdmin(): Promise<GatewayAdmin> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return { url, token: ADMIN_TOKEN };
}

function table(generation: number, replicas: Array<{ url: string; state: 'ready' | 'draining' }>, run = 'web'): ServiceTableInput {
  return { run, generation, auth: null, current_revision: 0, revisions: [{ number: 0, entry: ['main'], groups: [{ name: 'main', replicas }] }] };
}

function activities(gateways: GatewayAdmin[]) {
  const acts = createGatewayRouteActivities(gateways);
  const env = new MockActivityEnvironment();
  return {
    push: (t: ServiceTableInput) => env.run(acts.pushServiceTable, { table: t }) as Promise<PushServiceTableResult>,
    remove: (run: string) => env.run(acts.removeServiceTable, { run }) as Promise<void>,
    drain: (run: string, urls: string[], timeout_s: number) => env.run(acts.drainReplicas, { run, urls, timeout_s }) as Promise<DrainReplicasResult>,
  };
}

/** The activity's failure, its message kept for the token check. */
async function failureOf(promise: Promise<unknown>): Promise<ApplicationFailure> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApplicationFailure);
  messages.push((err as ApplicationFailure).message);
  return err as ApplicationFailure;
}

async function get(url: string, host?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    httpRequest(url, { headers: host ? { host } : {} }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    })
      .on('error', reject)
      .end();
  });
}

describe('pushServiceTable / removeServiceTable', () => {
  it('a pushed table routes to its ready replica; a newer generation drains it (503); a stale push changes nothing and succeeds', async () => {
    const replica = await upstream();
    const gw = await gateway('svc.test');
    const { push } = activities([admin(gw)]);
    const port = new URL(gw.url).port;

    const pushed = await push(table(1, [{ url: replica, state: 'ready' }]));
    expect(pushed.endpoints).toEqual([`${gw.url}/services/web/`, `http://web.svc.test:${port}/`]);
    expect(await get(`${gw.url}/services/web/v1/models`)).toEqual({ status: 200, body: 'upstream /v1/models' });
    // The Host endpoint is what the data plane routes by Host.
    expect(await get(`${gw.url}/v1/models`, `web.svc.test:${port}`)).toEqual({ status: 200, body: 'upstream /v1/models' });

    await push(table(2, [{ url: replica, state: 'draining' }]));
    expect((await get(`${gw.url}/services/web/`)).status).toBe(503);
    await push(table(2, []));
    expect((await get(`${gw.url}/services/web/`)).status).toBe(503);

    // A late retry of generation 1: the gateway keeps generation 2, and the push is no failure.
    expect((await push(table(1, [{ url: replica, state: 'ready' }]))).endpoints).toEqual(pushed.endpoints);
    expect((await get(`${gw.url}/services/web/`)).status).toBe(503);
    expect(gw.services.get('web')?.table.generation).toBe(2);
  });

  it('two gateways get the same table', async () => {
    const replica = await upstream();
    const [a, b] = await Promise.all([gateway(), gateway()]);
    const { endpoints } = await activities([admin(a), admin(b)]).push(table(1, [{ url: replica, state: 'ready' }]));
    expect(endpoints).toEqual([`${a.url}/services/web/`, `${b.url}/services/web/`]);
    for (const gw of [a, b]) expect(await get(`${gw.url}/services/web/x`)).toEqual({ status: 200, body: 'upstream /x' });
  });

  it('a gateway down: a retryable failure naming it, and the other gateway has the table', async () => {
    const replica = await upstream();
    const [up, down] = await Promise.all([gateway(), deadAdmin()]);
    const failure = await failureOf(activities([admin(up), down]).push(table(1, [{ url: replica, state: 'ready' }])));
    expect(failure.type).toBe('GatewayUnreachable');
    expect(failure.nonRetryable).toBe(false);
    expect(failure.message).toContain(down.url);
    expect(failure.message).not.toContain(up.adminUrl);
    expect(failure.message).toContain('the other 1 gateway(s) took it');
    expect(await get(`${up.url}/services/web/`)).toEqual({ status: 200, body: 'upstream /' });
  });

  it('a gateway answering 5xx is retried; a 4xx other than 409 (a bad table, a wrong token) is not, with the gateway\'s words', async () => {
    const broken = await listening(createServer((_req, res) => res.writeHead(502).end('{"error":"upstream of the admin API is down"}')));
    const five = await failureOf(activities([{ url: broken, token: ADMIN_TOKEN }]).push(table(1, [])));
    expect(five.type).toBe('GatewayUnreachable');
    expect(five.nonRetryable).toBe(false);
    expect(five.message).toContain(`gateway ${broken}: PUT /services/web answered 502: upstream of the admin API is down`);

    const gw = await gateway();
    const bad = { ...table(1, []), current_revision: 4 };
    const refused = await failureOf(activities([admin(gw)]).push(bad));
    expect(refused.type).toBe('GatewayRefused');
    expect(refused.nonRetryable).toBe(true);
    expect(refused.message).toContain('current_revision: revision 4 is not among the revisions (0)');

    const wrongToken = await failureOf(activities([admin(gw, 'another-token-0123456789abcdef')]).push(table(1, [])));
    expect(wrongToken.nonRetryable).toBe(true);
    expect(wrongToken.message).toContain(`gateway ${gw.adminUrl}: PUT /services/web answered 403: wrong admin token`);
    expect(wrongToken.message).not.toContain('another-token-0123456789abcdef');
  });

  it('a worker with no gateway: NoGateway, not retried, saying what to do', async () => {
    const failure = await failureOf(activities([]).push(table(1, [])));
    expect(failure.type).toBe('NoGateway');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toContain('this worker has no gateway: start `troupe gateway` and give the worker --gateway ADMIN_URL');
  });

  it('remove: 404 through the data plane after it; removing again, or with no gateway, is success; a gateway down is retried', async () => {
    const replica = await upstream();
    const gw = await gateway();
    const { push, remove } = activities([admin(gw)]);
    await push(table(1, [{ url: replica, state: 'ready' }]));
    await remove('web');
    expect((await get(`${gw.url}/services/web/`)).status).toBe(404);
    await remove('web');
    await activities([]).remove('web');
    const down = await deadAdmin();
    const failure = await failureOf(activities([admin(gw), down]).remove('web'));
    expect(failure.type).toBe('GatewayUnreachable');
    expect(failure.message).toContain(down.url);
  });
});

describe('the admin client', () => {
  it('gives up on a gateway that does not answer, in its time limit, naming the gateway and not the token', async () => {
    const silent = await listening(createServer(() => undefined));
    const started = Date.now();
    const err = await gatewayInfo({ url: silent, token: ADMIN_TOKEN }, 300).catch((e: unknown) => e);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(err).toBeInstanceOf(GatewayAdminError);
    expect((err as GatewayAdminError).failure).toBe('unreachable');
    expect((err as GatewayAdminError).message).toBe(`gateway ${silent}: GET /info got no answer (no answer in 300 ms)`);
    messages.push((err as Error).message);
  });

  it('cuts the token out of what a gateway answers, should it echo the request back', async () => {
    const echo = await listening(createServer((req, res) => res.writeHead(400).end(JSON.stringify({ error: `bad request with ${req.headers.authorization}` }))));
    const failure = await failureOf(activities([{ url: echo, token: ADMIN_TOKEN }]).push(table(1, [])));
    expect(failure.message).toContain('bad request with Bearer <admin token>');
  });
});

describe('drainReplicas', () => {
  it('waits until no request is in flight to the replicas off the table, or its time is up', async () => {
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    const replica = await listening(createServer((req, res) => void held.then(() => res.end('late'))));
    const gw = await gateway();
    const { push, drain } = activities([admin(gw)]);
    await push(table(1, [{ url: replica, state: 'ready' }]));
    const answer = get(`${gw.url}/services/web/slow`);
    await new Promise((r) => setTimeout(r, 200));
    await push(table(2, []));
    // Off the table, one request still in flight: a short drain gives up and says so.
    expect(await drain('web', [replica], 0.3)).toEqual({ left: 1, silent_gateways: [] });
    const drained = drain('web', [replica], 30);
    await new Promise((r) => setTimeout(r, 300));
    release();
    expect(await drained).toEqual({ left: 0, silent_gateways: [] });
    expect(await answer).toEqual({ status: 200, body: 'late' });
    // Nothing in flight, or no table of the run: at once.
    expect(await drain('other', [replica], 30)).toEqual({ left: 0, silent_gateways: [] });
  });

  it('a gateway that does not answer is named, and the drain waits its time out', async () => {
    const { drain } = activities([await deadAdmin()]);
    const result = await drain('web', ['http://127.0.0.1:9'], 0.3);
    expect(result.left).toBe(0);
    expect(result.silent_gateways).toHaveLength(1);
  });
});

describe("checkRevision (a rollout's gate A) through every gateway", () => {
  /** The activity with these gateways; a gateway without the revision is asked again for `waitMs`. */
  function gateA(gateways: GatewayAdmin[], waitMs = 1_000) {
    const acts = createSyntheticRequestActivities(gateways, { tableWaitMs: waitMs });
    const env = new MockActivityEnvironment();
    return (input: CheckRevisionInput) => env.run(acts.checkRevision, input) as Promise<CheckRevisionResult>;
  }
  const PROBE = { type: 'http' as const, url: '/ready', method: 'get' as const, headers: [], body: null, timeout_s: 5, interval_s: 10, ready_after: 1, until_ready: false };

  /** A replica whose `/ready` answers `status`, counting the requests it gets. */
  async function readyReplica(status: number): Promise<{ url: string; asked: () => number }> {
    let asked = 0;
    const url = await listening(createServer((req, res) => res.writeHead(req.url === '/ready' ? ((asked += 1), status) : 200).end('body not to be shown')));
    return { url, asked: () => asked };
  }

  /** The table of run `web` whose revision 1 (no traffic yet) is served by `fresh`, revision 0 by `old`. */
  const rolling = (generation: number, old: string, fresh: string[]): ServiceTableInput => ({
    run: 'web',
    generation,
    auth: null,
    current_revision: 0,
    revisions: [
      { number: 0, entry: ['main'], groups: [{ name: 'main', replicas: [{ url: old, state: 'ready' }] }] },
      { number: 1, entry: ['main'], groups: [{ name: 'main', replicas: fresh.map((url) => ({ url, state: 'ready' as const })) }] },
    ],
  });

  it('passes when the request passes from the worker and from each gateway, saying how many gateways', async () => {
    const [old, fresh] = await Promise.all([readyReplica(200), readyReplica(200)]);
    const [a, b] = await Promise.all([gateway(), gateway()]);
    await activities([admin(a), admin(b)]).push(rolling(3, old.url, [fresh.url]));
    const verdict = await gateA([admin(a), admin(b)])({ urls: [fresh.url], probe: PROBE, run: 'web', revision: 1 });
    expect(verdict).toEqual({ error: null, note: expect.stringMatching(/^GET \/ready passed on 1 entry replica \(slowest \d+ ms\), and through 2 gateways \(slowest \d+ ms\)$/) });
    // Once from the worker, once from each gateway; the old revision's replica is not asked.
    expect(fresh.asked()).toBe(3);
    expect(old.asked()).toBe(0);
  });

  it("fails naming the gateway, the replica and its status where a gateway's way fails though the worker's passes", async () => {
    const [old, good, bad] = await Promise.all([readyReplica(200), readyReplica(200), readyReplica(503)]);
    const [a, b] = await Promise.all([gateway(), gateway()]);
    await activities([admin(a)]).push(rolling(3, old.url, [good.url]));
    // Gateway b's table sends users of revision 1 to a replica that answers 503.
    await activities([admin(b)]).push(rolling(3, old.url, [bad.url]));
    const verdict = await gateA([admin(a), admin(b)])({ urls: [good.url], probe: PROBE, run: 'web', revision: 1 });
    expect(verdict).toEqual({ error: expect.stringMatching(new RegExp(`^GET /ready to ${bad.url} through gateway ${b.adminUrl}: HTTP 503 after \\d+ ms$`)), note: null });
    messages.push(verdict.error ?? '');
    expect(verdict.error).not.toContain('body not to be shown');
  });

  it("a gateway whose table lacks the revision fails it, named, once its push has not come in the wait; one that comes meanwhile passes", async () => {
    const [old, fresh] = await Promise.all([readyReplica(200), readyReplica(200)]);
    const [a, behind] = await Promise.all([gateway(), gateway()]);
    await activities([admin(a)]).push(rolling(3, old.url, [fresh.url]));
    await activities([admin(behind)]).push(table(2, [{ url: old.url, state: 'ready' }]));
    const started = Date.now();
    const verdict = await gateA([admin(a), admin(behind)], 1_000)({ urls: [fresh.url], probe: null, run: 'web', revision: 1 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect(verdict).toEqual({ error: `GET /: gateway ${behind.adminUrl}: POST /services/web/check answered 409: revision 1 not in this gateway's table (generation 2) (asked for 1 s)`, note: null });
    messages.push(verdict.error ?? '');

    // The push lands while the gate waits for it: the gate passes.
    const waiting = gateA([admin(a), admin(behind)], 10_000)({ urls: [fresh.url], probe: null, run: 'web', revision: 1 });
    await new Promise((r) => setTimeout(r, 700));
    await activities([admin(behind)]).push(rolling(3, old.url, [fresh.url]));
    expect((await waiting).error).toBeNull();
  });

  it('a gateway that refuses the token fails it at once; without the run and revision, or with no gateway, only the worker sends it', async () => {
    const [old, fresh] = await Promise.all([readyReplica(200), readyReplica(200)]);
    const gw = await gateway();
    await activities([admin(gw)]).push(rolling(3, old.url, [fresh.url]));
    const started = Date.now();
    const refused = await gateA([admin(gw, 'another-token-0123456789abcdef')], 30_000)({ urls: [fresh.url], probe: null, run: 'web', revision: 1 });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(refused.error).toBe(`GET /: gateway ${gw.adminUrl}: POST /services/web/check answered 403: wrong admin token`);
    messages.push(refused.error ?? '');

    const asked = fresh.asked();
    const workerOnly = { error: null, note: expect.stringMatching(/^GET \/ready passed on 1 entry replica \(slowest \d+ ms\)$/) };
    expect(await gateA([admin(gw)])({ urls: [fresh.url], probe: PROBE })).toEqual(workerOnly);
    expect(await gateA([])({ urls: [fresh.url], probe: PROBE, run: 'web', revision: 1 })).toEqual(workerOnly);
    // One request each, the worker's: no gateway sent one.
    expect(fresh.asked() - asked).toBe(2);
  });
});
