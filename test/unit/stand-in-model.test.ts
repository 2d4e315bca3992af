import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/devserver/dev-server';
import { freePort } from '../helpers/free-port';

/**
 * The demo's stand-in model server (examples/services/stand-in-model.py) as nodes run it, without a
 * run: a prefill and a decode replica on loopback addresses of their own, a router that finds them in
 * a peers file written here. Its promises: OpenAI-shaped answers marked with group, replica and
 * revision; the router's prefill → decode path from `ready` nodes of the book as it is at each
 * request; a reason, not a hang, when a group has no ready node; a clean exit on SIGTERM; with
 * --error-rate (or STAND_IN_ERROR_RATE) a bad revision's share of 500s.
 */

const script = join(projectRoot, 'examples', 'services', 'stand-in-model.py');
const scratch = mkdtempSync(join(tmpdir(), 'troupe-stand-in-'));
const peersFile = join(scratch, 'peers.json');
const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

interface Node {
  group_rank: number;
  ip: string;
  ready: boolean;
}

/** Replaced atomically, as the worker replaces a node's book. */
function writePeers(version: number, groups: Record<string, Node[]>): void {
  const book = {
    version,
    run_name: 'stand-in',
    groups: Object.entries(groups).map(([name, nodes], index) => ({
      name,
      index,
      nodes: nodes.map((n, i) => ({ rank: i, group_rank: n.group_rank, ip: n.ip, gpus: 0, attempt: 0, status: n.ready ? 'ready' : 'starting', ready: n.ready })),
    })),
  };
  writeFileSync(`${peersFile}.tmp`, JSON.stringify(book));
  renameSync(`${peersFile}.tmp`, peersFile);
}

async function standIn(role: string, group: string, host: string, port: number, extra: string[] = [], env: Record<string, string> = {}): Promise<ChildProcess> {
  const child = spawn('python3', [script, '--role', role, '--host', host, '--port', String(port), ...extra], {
    env: { PATH: process.env.PATH, DSTACK_NODE_GROUP_NAME: group, DSTACK_NODE_GROUP_NODE_RANK: '0', TROUPE_PEERS_FILE: peersFile, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout?.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`${role} exited with ${code}`)));
  });
  return child;
}

/** A chat completion, or the error the stand-in answers instead. */
interface ChatAnswer {
  object?: string;
  choices: Array<{ message: { content: string } }>;
  troupe: Record<string, unknown>;
  error: { message: string };
}

async function chat(url: string): Promise<{ status: number; body: ChatAnswer }> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }] }), signal: AbortSignal.timeout(10_000) });
  return { status: res.status, body: (await res.json()) as ChatAnswer };
}

describe('the stand-in model server', () => {
  it('routes prefill → decode through ready peers as the book says at each request, and stops on SIGTERM', async () => {
    const [workerPort, routerPort] = [await freePort(), await freePort()];
    await standIn('prefill', 'prefill', '127.0.0.2', workerPort);
    await standIn('decode', 'decode', '127.0.0.3', workerPort);
    const router = await standIn('router', 'router', '127.0.0.1', routerPort, ['--worker-port', String(workerPort)], { TROUPE_REVISION: '4' });
    const url = `http://127.0.0.1:${routerPort}`;
    // A prefill node not ready yet (nothing listens there): never chosen.
    writePeers(1, {
      router: [{ group_rank: 0, ip: '127.0.0.1', ready: true }],
      prefill: [
        { group_rank: 0, ip: '127.0.0.2', ready: true },
        { group_rank: 1, ip: '127.0.0.9', ready: false },
      ],
      decode: [{ group_rank: 0, ip: '127.0.0.3', ready: true }],
    });

    for (let i = 0; i < 3; i++) {
      const { status, body } = await chat(url);
      expect(status).toBe(200);
      expect(body.object).toBe('chat.completion');
      expect(body.choices[0]?.message.content).toBe('[router/0 -> prefill/0 -> decode/0] Hello, world');
      expect(body.troupe).toMatchObject({ group: 'router', replica: 0, revision: '4', peers_version: 1, prefill: { group: 'prefill', replica: 0 }, decode: { group: 'decode', replica: 0 } });
    }
    const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: Array<{ troupe: unknown }> };
    expect(models.data[0]?.troupe).toMatchObject({ group: 'router', role: 'router' });
    expect((await fetch(`${url}/health`)).status).toBe(200);

    // The book changes: decode has no ready node now, and the next request says so at once.
    writePeers(2, { prefill: [{ group_rank: 0, ip: '127.0.0.2', ready: true }], decode: [{ group_rank: 0, ip: '127.0.0.3', ready: false }] });
    const none = await chat(url);
    expect(none.status).toBe(503);
    expect(none.body.error.message).toBe("router/0: no ready replica in group 'decode' (peers v2)");

    const exited = new Promise<number | null>((resolve) => router.once('exit', resolve));
    router.kill('SIGTERM');
    expect(await exited).toBe(0);
  }, 30_000);

  it('answers 503 while its model loads, then 200', async () => {
    const port = await freePort();
    await standIn('decode', 'decode', '127.0.0.1', port, ['--warmup', '1']);
    expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(503);
    expect((await chat(`http://127.0.0.1:${port}`)).status).toBe(503);
    await expect.poll(async () => (await fetch(`http://127.0.0.1:${port}/health`)).status, { timeout: 5_000 }).toBe(200);
    const { body } = await chat(`http://127.0.0.1:${port}`);
    expect(body.choices[0]?.message.content).toBe('Hello, world');
    expect(body.troupe).toEqual({ group: 'decode', replica: 0, role: 'decode' });
  }, 30_000);

  it('answers a bad revision\'s share of chat completions with a 500 that says so (--error-rate, STAND_IN_ERROR_RATE); /health stays 200', async () => {
    const [all, half] = [await freePort(), await freePort()];
    await standIn('decode', 'decode', '127.0.0.1', all, ['--error-rate', '1']);
    await standIn('decode', 'decode', '127.0.0.1', half, [], { STAND_IN_ERROR_RATE: '0.5' });
    const bad = await chat(`http://127.0.0.1:${all}`);
    expect(bad.status).toBe(500);
    expect(bad.body.error.message).toBe('decode/0: a bad revision: this stand-in fails 100% of chat completions (--error-rate 1.0)');
    expect((await fetch(`http://127.0.0.1:${all}/health`)).status).toBe(200);
    const statuses = await Promise.all(Array.from({ length: 100 }, async () => (await chat(`http://127.0.0.1:${half}`)).status));
    // 100 draws at 0.5: fewer than 20 of either is a chance below 1e-9.
    expect(statuses.filter((s) => s === 500).length).toBeGreaterThan(20);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThan(20);
    expect(statuses.filter((s) => s !== 200 && s !== 500)).toEqual([]);
  }, 30_000);

  it('refuses an error rate outside 0..1, from the flag or the environment', () => {
    const run = (extra: string[], env: Record<string, string> = {}) => spawnSync('python3', [script, '--role', 'decode', ...extra], { env: { PATH: process.env.PATH, ...env }, encoding: 'utf8' });
    const flag = run(['--error-rate', '1.5']);
    expect(flag.status).toBe(2);
    expect(flag.stderr).toContain('argument --error-rate: 1.5 is not from 0 to 1');
    const environ = run([], { STAND_IN_ERROR_RATE: 'often' });
    expect(environ.status).toBe(2);
    expect(environ.stderr).toContain("STAND_IN_ERROR_RATE: 'often' is not a number from 0 to 1");
  });
});
