import { execFile } from 'node:child_process';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ReadyProbe } from '../../src/plan/plan-schema';
import { renderProbeScript } from '../../src/runner/ready-probe';

const run = promisify(execFile);

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** The probe script, run by bash against a real HTTP server on 127.0.0.1. */
describe('the readiness probe script', () => {
  let server: Server;
  let port = 0;
  const seen: Seen[] = [];
  let status = 200;

  beforeAll(async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
        res.writeHead(status).end('ok');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const probe = (check: Extract<ReadyProbe['check'], { kind: 'http' }>): ReadyProbe => ({ check, interval_s: 1, timeout_s: 5 });
  const probeOnce = async (p: ReadyProbe) => {
    try {
      const { stdout } = await run('bash', ['-c', renderProbeScript(p, '127.0.0.1')]);
      return { code: 0, out: stdout };
    } catch (err) {
      const e = err as { code: number; stdout: string };
      return { code: e.code, out: e.stdout };
    }
  };

  it('sends a GET by default and passes on 2xx', async () => {
    status = 204;
    seen.length = 0;
    expect((await probeOnce(probe({ kind: 'http', port, path: '/health' }))).code).toBe(0);
    expect(seen[0]).toMatchObject({ method: 'GET', url: '/health', body: '' });
  });

  it("sends a service probe's method, headers and body exactly (the model's chat-completion probe)", async () => {
    status = 200;
    seen.length = 0;
    const body = '{"model": "m", "messages": [{"role": "user", "content": "hi — %s $(x) \'q\'"}], "max_tokens": 1}';
    const result = await probeOnce(
      probe({
        kind: 'http',
        port,
        path: '/v1/chat/completions',
        method: 'POST',
        headers: [{ name: 'Content-Type', value: 'application/json' }, { name: 'X-Odd', value: "50% $HOME 'x'\r\nInjected: 1" }],
        body,
      }),
    );
    expect(result.code).toBe(0);
    expect(seen[0]?.method).toBe('POST');
    expect(seen[0]?.url).toBe('/v1/chat/completions');
    expect(seen[0]?.body).toBe(body);
    expect(seen[0]?.headers['content-type']).toBe('application/json');
    // A CR/LF in a value cannot start a header of its own.
    expect(seen[0]?.headers['x-odd']).toBe("50% $HOME 'x' Injected: 1");
    expect(seen[0]?.headers.injected).toBeUndefined();
  });

  it('fails with the status it saw', async () => {
    status = 503;
    const result = await probeOnce(probe({ kind: 'http', port, path: '/a b' }));
    expect(result.code).toBe(1);
    expect(result.out).toContain('HTTP 503');
    expect(seen.at(-1)?.url).toBe('/a%20b');
  });
});
