/**
 * The gateway's cost: the same closed-loop client, at the same concurrency, straight to a stand-in
 * replica (the floor) and through `troupe gateway` in front of it. Replica, gateway and client are
 * three processes on this machine (they share its cores). Prints p50/p99 latency and requests/s side
 * by side; asserts nothing.
 *
 *   npx tsx bench/gateway.ts [--seconds 4] [--concurrency 1,32]
 *   GATEWAY_PROF=DIR also writes the gateway process's CPU profile (node --cpu-prof) into DIR.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

const { values } = parseArgs({ options: { seconds: { type: 'string', default: '4' }, concurrency: { type: 'string', default: '1,32' } } });
const SECONDS = Number(values.seconds);
const LEVELS = values.concurrency.split(',').map(Number);
const TOKEN = 'bench-admin-token-0123456789';
const root = fileURLToPath(new URL('..', import.meta.url));
const children: ChildProcess[] = [];

/** Starts a child and resolves the first match of `ready` in its output. */
function start(args: string[], ready: RegExp, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const child = spawn(process.execPath, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  return new Promise((resolve, reject) => {
    let out = '';
    const read = (c: Buffer) => {
      out += c.toString();
      const m = ready.exec(out);
      if (m) resolve(m[1] as string);
    };
    child.stdout?.on('data', read);
    child.stderr?.on('data', read);
    child.once('exit', (code) => reject(new Error(`${args.join(' ')} exited ${code}: ${out}`)));
  });
}

const REPLICA = `
const body = JSON.stringify({ id: 'cmpl-bench', object: 'chat.completion', choices: [{ message: { role: 'assistant', content: 'ok' } }] });
const s = require('http').createServer((q, r) => { q.resume(); q.on('end', () => { r.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }); r.end(body); }); });
s.keepAliveTimeout = 60000;
s.listen(0, '127.0.0.1', () => console.log('replica on http://127.0.0.1:' + s.address().port));
`;

interface Figures {
  p50: number;
  p99: number;
  rps: number;
  failed: number;
}

async function load(origin: string, path: string, concurrency: number): Promise<Figures> {
  const pool = new Pool(origin, { connections: concurrency });
  const latencies: number[] = [];
  let failed = 0;
  const run = async (until: number, record: boolean) => {
    while (performance.now() < until) {
      const t0 = performance.now();
      try {
        const res = await pool.request({ path, method: 'GET' });
        await res.body.text();
        if (res.statusCode !== 200) failed += 1;
      } catch {
        failed += 1;
      }
      if (record) latencies.push(performance.now() - t0);
    }
  };
  const warm = performance.now() + 500;
  await Promise.all(Array.from({ length: concurrency }, () => run(warm, false)));
  const t0 = performance.now();
  const end = t0 + SECONDS * 1000;
  await Promise.all(Array.from({ length: concurrency }, () => run(end, true)));
  const elapsed = (performance.now() - t0) / 1000;
  await pool.close();
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? NaN;
  return { p50: at(0.5), p99: at(0.99), rps: latencies.length / elapsed, failed };
}

try {
  const replica = await start(['-e', REPLICA], /replica on (\S+)/);
  const gatewayOut = await start(
    [...(process.env.GATEWAY_PROF ? ['--cpu-prof', '--cpu-prof-dir', process.env.GATEWAY_PROF] : []), 'bin/troupe.js', 'gateway', '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'],
    /(Gateway on \S+ .*admin API on \S+);/,
    { ...process.env, TROUPE_GATEWAY_ADMIN_TOKEN: TOKEN },
  );
  const gateway = /Gateway on (\S+)/.exec(gatewayOut)?.[1] as string;
  const admin = /admin API on (\S+)/.exec(gatewayOut)?.[1] as string;
  const table = { run: 'bench', generation: 0, auth: null, current_revision: 0, revisions: [{ number: 0, entry: ['main'], groups: [{ name: 'main', replicas: [{ url: replica, state: 'ready' }] }] }] };
  const put = await fetch(`${admin}/services/bench`, { method: 'PUT', headers: { authorization: `Bearer ${TOKEN}` }, body: JSON.stringify(table) });
  if (put.status !== 200) throw new Error(`PUT table: ${put.status} ${await put.text()}`);

  process.stdout.write(`gateway bench: node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), ${SECONDS} s a case, closed loop, GET of a 100-byte JSON answer\n\n`);
  const row = (cells: string[]) => process.stdout.write(`${cells.map((c, i) => (i === 0 ? c.padEnd(12) : c.padStart(11))).join(' ')}\n`);
  row(['concurrency', 'direct p50', 'gw p50', 'direct p99', 'gw p99', 'direct rps', 'gw rps', 'gw/direct']);
  for (const c of LEVELS) {
    const direct = await load(replica, '/v1/chat/completions', c);
    const through = await load(gateway, '/services/bench/v1/chat/completions', c);
    const ms = (x: number) => `${x.toFixed(2)} ms`;
    row([String(c), ms(direct.p50), ms(through.p50), ms(direct.p99), ms(through.p99), direct.rps.toFixed(0), through.rps.toFixed(0), `${((through.rps / direct.rps) * 100).toFixed(0)} %`]);
    if (direct.failed + through.failed > 0) process.stdout.write(`  failed: direct ${direct.failed}, gateway ${through.failed}\n`);
  }
} finally {
  for (const child of children) child.kill('SIGTERM');
}
