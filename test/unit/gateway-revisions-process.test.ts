import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { putServiceTable, serviceFigures, type GatewayAdmin } from '../../src/gateway/admin-client';
import type { ServiceTableInput } from '../../src/gateway/routing-table';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { listenLocal } from '../helpers/local-server';

/**
 * Revisions through the real `troupe gateway` process (one, and `--workers 2`), to real HTTP upstreams
 * on 127.0.0.1: traffic shares, every answer naming the revision that served it, a canary with nothing
 * ready, the figures summed over workers, and a request held until a replica is ready.
 */

const scratch = mkdtempSync(join(tmpdir(), 'troupe-gw-revisions-'));
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** An upstream answering its name; `/fail` answers 500. */
async function upstream(name: string): Promise<string> {
  const { url, close } = await listenLocal(
    createServer((req, res) => {
      res.writeHead(req.url === '/fail' ? 500 : 200, { 'content-type': 'text/plain' });
      res.end(name);
    }),
  );
  cleanups.push(close);
  return url;
}

/** A port nothing listens on. */
async function deadUrl(): Promise<string> {
  const { url, close } = await listenLocal(createServer());
  await close();
  return url;
}

async function gateway(args: string[] = []): Promise<{ gw: GatewayProcess; admin: GatewayAdmin }> {
  const dir = mkdtempSync(join(scratch, 'gw-'));
  const gw = await startGatewayProcess(dir, args);
  cleanups.push(async () => {
    const exited = new Promise<void>((resolve) => gw.child.once('exit', () => resolve()));
    if (gw.child.exitCode === null && gw.child.signalCode === null && gw.child.pid !== undefined) {
      process.kill(gw.child.pid, 'SIGTERM');
      await exited;
    }
  });
  return { gw, admin: { url: gw.adminUrl, token: readFileSync(gw.adminTokenFile, 'utf8').trim() } };
}

type Revision = ServiceTableInput['revisions'][number];
function revision(number: number, url: string, extra: Partial<Revision> = {}, state: 'ready' | 'draining' = 'ready'): Revision {
  return { number, entry: ['router'], groups: [{ name: 'router', replicas: [{ url, state }] }], ...extra };
}
function table(run: string, generation: number, current: number, revisions: Revision[], extra: Partial<ServiceTableInput> = {}): ServiceTableInput {
  return { run, generation, auth: null, current_revision: current, revisions, ...extra };
}

interface Answer {
  status: number;
  body: string;
  revision: string | null;
}

/** A GET on a connection of its own (a clustered gateway hands each new connection to its next worker). */
function get(url: string, signal?: AbortSignal): Promise<Answer> {
  return new Promise((resolve, reject) => {
    httpRequest(url, { agent: false, ...(signal ? { signal } : {}) }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, revision: (res.headers['troupe-revision'] as string | undefined) ?? null }));
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
}

/** `n` GETs, `width` at a time. */
async function many(url: string, n: number, width = 20): Promise<Answer[]> {
  const answers: Answer[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) {
        next += 1;
        answers.push(await get(url));
      }
    }),
  );
  return answers;
}

describe('a table with several revisions', () => {
  it('splits new requests 90/10 and marks every answer with the revision that served it', async () => {
    const [old, canary] = await Promise.all([upstream('old'), upstream('canary')]);
    const { gw, admin } = await gateway();
    await putServiceTable(admin, table('web', 1, 1, [revision(1, old), revision(2, canary, { traffic: 10 })]));
    const answers = await many(`${gw.url}/services/web/x`, 600);
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    // Each answer's header names the upstream that gave it: never one revision's header on another's answer.
    expect(answers.filter((a) => !((a.revision === '1' && a.body === 'old') || (a.revision === '2' && a.body === 'canary')))).toEqual([]);
    const toCanary = answers.filter((a) => a.revision === '2').length;
    // 60 expected; the band is ±5 standard deviations (~7.3 each).
    expect(toCanary).toBeGreaterThan(24);
    expect(toCanary).toBeLessThan(96);
  }, 60_000);

  it('sends a canary\'s share to the current revision while the canary has nothing ready', async () => {
    const [old, canary] = await Promise.all([upstream('old'), upstream('canary')]);
    const { gw, admin } = await gateway();
    await putServiceTable(admin, table('web', 1, 1, [revision(1, old), revision(2, canary, { traffic: 50 }, 'draining')]));
    const answers = await many(`${gw.url}/services/web/x`, 100);
    expect(new Set(answers.map((a) => `${a.status} ${a.revision} ${a.body}`))).toEqual(new Set(['200 1 old']));
  }, 60_000);
});

describe('the figures of a clustered gateway (--workers 2)', () => {
  it('are the sum over both workers: requests and errors exact, 5xx and failed forwards counted', async () => {
    const [a, dead] = await Promise.all([upstream('a'), deadUrl()]);
    const { gw, admin } = await gateway(['--workers', '2']);
    await putServiceTable(admin, table('web', 1, 1, [revision(1, a), revision(2, dead, { traffic: 0 })]));
    await putServiceTable(admin, table('gone', 1, 0, [revision(0, dead)]));
    // Each on a new connection: the workers take them in turn.
    const ok = await many(`${gw.url}/services/web/ok`, 30, 6);
    const failed = await many(`${gw.url}/services/web/fail`, 10, 6);
    const refused = await many(`${gw.url}/services/gone/x`, 4, 2);
    expect([...ok, ...failed, ...refused].map((r) => r.status)).toEqual([...Array(30).fill(200), ...Array(10).fill(500), ...Array(4).fill(502)]);
    const web = await serviceFigures(admin, 'web', 60);
    expect(web?.window_s).toBe(60);
    expect(web?.revisions.map(({ revision, requests, errors, error_rate, inflight }) => ({ revision, requests, errors, error_rate, inflight }))).toEqual([
      { revision: 2, requests: 0, errors: 0, error_rate: 0, inflight: 0 },
      { revision: 1, requests: 40, errors: 10, error_rate: 0.25, inflight: 0 },
    ]);
    expect(web?.revisions[1]?.latency_p95_ms).toBeGreaterThan(0);
    expect(web?.revisions[1]?.latency_p50_ms).toBeLessThanOrEqual(web?.revisions[1]?.latency_p95_ms ?? 0);
    expect(web?.groups).toEqual([
      { revision: 2, group: 'router', requests: 0, rps: 0, inflight: 0 },
      { revision: 1, group: 'router', requests: 40, rps: 40 / 60, inflight: 0 },
    ]);
    const gone = await serviceFigures(admin, 'gone', 30);
    expect(gone?.revisions.map((r) => [r.requests, r.errors, r.latency_p95_ms])).toEqual([[4, 4, null]]);
    expect(await serviceFigures(admin, 'nothing', 30)).toBeNull();
    const bad = await fetch(`${gw.adminUrl}/services/web/figures?window=301`, { headers: { authorization: `Bearer ${admin.token}` } });
    expect(bad.status).toBe(400);
    expect((await fetch(`${gw.adminUrl}/services/web/figures`)).status).toBe(401);
  }, 60_000);
});

describe('a service with nothing ready and hold_s', () => {
  it('holds a request until a table brings a ready replica; a 503 saying it waited after hold_s; a client gone is no longer held', async () => {
    const a = await upstream('a');
    const { gw, admin } = await gateway();
    await putServiceTable(admin, table('web', 1, 1, [revision(1, a, {}, 'draining')], { hold_s: 60 }));
    const held = get(`${gw.url}/services/web/x`);
    await expect.poll(async () => (await serviceFigures(admin, 'web', 30))?.held, { timeout: 10_000 }).toBe(1);
    // A client that goes away stops being held.
    const leaving = new AbortController();
    const left = get(`${gw.url}/services/web/x`, leaving.signal).catch(() => null);
    await expect.poll(async () => (await serviceFigures(admin, 'web', 30))?.held, { timeout: 10_000 }).toBe(2);
    leaving.abort();
    await left;
    await expect.poll(async () => (await serviceFigures(admin, 'web', 30))?.held, { timeout: 10_000 }).toBe(1);

    await putServiceTable(admin, table('web', 2, 2, [revision(1, a, {}, 'draining'), revision(2, a)], { hold_s: 60 }));
    expect(await held).toEqual({ status: 200, body: 'a', revision: '2' });
    const after = await serviceFigures(admin, 'web', 30);
    expect([after?.held, after?.held_total]).toEqual([0, 2]);

    await putServiceTable(admin, table('web', 3, 2, [revision(2, a, {}, 'draining')], { hold_s: 1 }));
    const began = Date.now();
    const timedOut = await get(`${gw.url}/services/web/x`);
    expect(timedOut.status).toBe(503);
    expect(JSON.parse(timedOut.body)).toEqual({ error: 'no ready replica in group "router" of revision 2 of service "web"; waited 1 s for one' });
    expect(Date.now() - began).toBeGreaterThanOrEqual(900);
  }, 60_000);
});
