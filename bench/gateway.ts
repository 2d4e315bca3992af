/**
 * The gateway's cost beside its floor and its peer, in one run and at the same rates: requests
 * straight to a stand-in replica (direct), through `troupe gateway` (the real CLI), and through nginx
 * from Debian (a reverse proxy with a keep-alive upstream, started here with a config of its own in a
 * temp dir; the system's nginx is never touched). Replica, gateway, nginx and this client share the
 * machine's cores. Prints, and asserts nothing:
 *   - open loop (bench/harness/open-loop.ts: a fixed schedule, latency from each request's scheduled
 *     send time) at each rate: p50/p99 and what each proxy adds over direct;
 *   - closed loop (N connections, each sending its next request when the last answered): max req/s;
 *   - in both, the CPU time a request costs the replica (direct) or the proxy (its own processes only,
 *     from /proc): the figure least moved by other work on the machine;
 *   - the ratios gateway/nginx beside issue 27's target (p99 added ≤ 2 ms at 1,000 rps; throughput
 *     ≥ 50 % of nginx's).
 *
 *   npx tsx bench/gateway.ts [--seconds 10] [--rates 500,1000] [--connections 32] [--closed-seconds 5]
 *                            [--rounds 5] [--nginx-workers auto] [--gateway-workers 1] [--baseline DIR]
 * Each case's time is split into rounds that alternate the targets (see inRounds).
 *   --gateway-workers 1,2 runs one gateway per count (`troupe gateway --workers N`: N data-plane processes),
 *   named gateway, gateway×2, …
 *   --baseline DIR also runs the gateway of another checkout (DIR/bin/troupe.js, e.g. a worktree of main)
 *   as a fourth target, `baseline`: a change's before and after in one run, under the same load.
 *   GATEWAY_PROF=DIR also writes the gateway process's CPU profile (node --cpu-prof) into DIR. That
 *   profile samples wall-clock time: on a loaded machine it charges the time the thread lost to other
 *   processes to whatever it was in, most often a socket write.
 *   GATEWAY_PERF=1 starts the one-process gateway with --perf-basic-prof and prints its pid, for
 *   `perf record -g -p PID` during the closed loop: CPU samples, JS frames named (BENCHMARKS.md §7).
 * Without nginx (scripts/setup.sh --bench installs it) the bench says so and prints the other columns.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { childrenOf, cpuSeconds, loadAverage } from './harness/cpu';
import { openLoop, type OpenLoopResult } from './harness/open-loop';
import { percentile } from './harness/stats';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    rates: { type: 'string', default: '500,1000' },
    connections: { type: 'string', default: '32' },
    'closed-seconds': { type: 'string', default: '5' },
    'nginx-workers': { type: 'string', default: 'auto' },
    rounds: { type: 'string', default: '5' },
    baseline: { type: 'string' },
    'gateway-workers': { type: 'string', default: '1' },
  },
});
const SECONDS = Number(values.seconds);
const RATES = values.rates.split(',').map(Number);
const CONNECTIONS = Number(values.connections);
const CLOSED_SECONDS = Number(values['closed-seconds']);
const ROUNDS = Number(values.rounds);
const TOKEN = 'bench-admin-token-0123456789';
const TARGET_P99_ADDED_MS = 2;
const TARGET_RATE = 1000;
const TARGET_THROUGHPUT_SHARE = 0.5;
const root = fileURLToPath(new URL('..', import.meta.url));
const children: ChildProcess[] = [];

/** Starts a child and resolves the first match of `ready` in its output. */
function start(command: string, args: string[], ready: RegExp, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const child = spawn(command, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
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
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${out}`)));
  });
}

const REPLICA = `
const body = JSON.stringify({ id: 'cmpl-bench', object: 'chat.completion', choices: [{ message: { role: 'assistant', content: 'ok' } }] });
const s = require('http').createServer((q, r) => { q.resume(); q.on('end', () => { r.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }); r.end(body); }); });
s.keepAliveTimeout = 60000;
s.listen(0, '127.0.0.1', () => console.log('replica on http://127.0.0.1:' + s.address().port));
`;

/** `troupe gateway` of this checkout, or of `checkout` (the baseline), with the bench's table pushed. */
async function startGateway(replica: string, checkout = root, workers = 1): Promise<string> {
  const own = checkout === root && workers === 1;
  const prof = [...(process.env.GATEWAY_PROF && own ? ['--cpu-prof', '--cpu-prof-dir', process.env.GATEWAY_PROF] : []), ...(process.env.GATEWAY_PERF && own ? ['--perf-basic-prof'] : [])];
  const out = await start(
    process.execPath,
    [...prof, join(checkout, 'bin/troupe.js'), 'gateway', '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', ...(workers > 1 ? ['--workers', String(workers)] : [])],
    /(Gateway on \S+ .*admin API on \S+);/,
    { ...process.env, TROUPE_GATEWAY_ADMIN_TOKEN: TOKEN },
  );
  const gateway = /Gateway on (http:\/\/[^\s,]+)/.exec(out)?.[1] as string;
  const admin = /admin API on (http:\/\/[^\s,;]+)/.exec(out)?.[1] as string;
  const table = { run: 'bench', generation: 0, auth: null, current_revision: 0, revisions: [{ number: 0, entry: ['main'], groups: [{ name: 'main', replicas: [{ url: replica, state: 'ready' }] }] }] };
  const put = await fetch(`${admin}/services/bench`, { method: 'PUT', headers: { authorization: `Bearer ${TOKEN}` }, body: JSON.stringify(table) });
  if (put.status !== 200) throw new Error(`PUT table: ${put.status} ${await put.text()}`);
  return gateway;
}

/** Debian's nginx binary, or null where it is not installed. */
function findNginx(): { bin: string; version: string } | null {
  for (const bin of ['nginx', '/usr/sbin/nginx']) {
    const r = spawnSync(bin, ['-v'], { encoding: 'utf8' });
    if (r.status === 0) return { bin, version: r.stderr.trim().replace(/^nginx version: /, '') };
  }
  return null;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

async function waitForPort(port: number, child: ChildProcess): Promise<void> {
  for (let i = 0; i < 100; i += 1) {
    if (child.exitCode !== null) throw new Error(`nginx exited ${child.exitCode}`);
    const up = await new Promise<boolean>((resolve) => {
      const c = createConnection({ host: '127.0.0.1', port }, () => (c.end(), resolve(true)));
      c.once('error', () => resolve(false));
    });
    if (up) return;
    await sleep(50);
  }
  throw new Error(`nginx did not listen on 127.0.0.1:${port} within 5 s`);
}

/**
 * nginx as dstack's gateway uses it: a reverse proxy for /services/bench/ with the prefix stripped and
 * the same forwarded headers the gateway adds, to an upstream of keep-alive connections.
 */
async function startNginx(bin: string, replica: string, dir: string): Promise<string> {
  const port = await freePort();
  await mkdir(join(dir, 'tmp'));
  const conf = join(dir, 'nginx.conf');
  await writeFile(
    conf,
    `daemon off;
worker_processes ${values['nginx-workers']};
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')} warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'tmp')};
  proxy_temp_path ${join(dir, 'tmp')};
  fastcgi_temp_path ${join(dir, 'tmp')};
  uwsgi_temp_path ${join(dir, 'tmp')};
  scgi_temp_path ${join(dir, 'tmp')};
  upstream replica { server ${new URL(replica).host}; keepalive 64; }
  server {
    listen 127.0.0.1:${port};
    location /services/bench/ {
      proxy_pass http://replica/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Host $host;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Prefix /services/bench;
    }
  }
}
`,
  );
  // -e: nginx would otherwise open the system's error log before it reads this config.
  const child = spawn(bin, ['-p', dir, '-c', conf, '-e', join(dir, 'error.log')], { stdio: 'ignore' });
  children.push(child);
  await waitForPort(port, child);
  return `http://127.0.0.1:${port}`;
}

interface Target {
  name: string;
  origin: string;
  path: string;
  /** The processes that do this target's work beside the client: the replica for direct, else the proxy. */
  pids: () => number[];
}

const cpuOf = (t: Target) => t.pids().reduce((sum, pid) => sum + cpuSeconds(pid), 0);
const lastChild = () => children[children.length - 1]?.pid as number;

interface Latency {
  p50: number;
  p99: number;
  failed: number;
  errors: string[];
  maxLagMs: number;
}

async function request(pool: Pool, path: string, signal?: AbortSignal): Promise<void> {
  const res = await pool.request({ path, method: 'GET', signal });
  await res.body.text();
  if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}`);
}

/**
 * One case in rounds: each round runs every target for its share of the time, in an order rotated each
 * round, so a burst of other work on the machine falls on all targets alike rather than on one.
 */
async function inRounds<T>(targets: Target[], measure: (target: Target, seconds: number) => Promise<T>, seconds: number): Promise<Map<string, { rounds: T[]; cpu: number }>> {
  const out = new Map(targets.map((t) => [t.name, { rounds: [] as T[], cpu: 0 }]));
  for (let round = 0; round < ROUNDS; round += 1) {
    for (let i = 0; i < targets.length; i += 1) {
      const t = targets[(i + round) % targets.length] as Target;
      const entry = out.get(t.name) as { rounds: T[]; cpu: number };
      const cpu0 = cpuOf(t);
      entry.rounds.push(await measure(t, seconds / ROUNDS));
      entry.cpu += cpuOf(t) - cpu0;
    }
  }
  return out;
}

async function openLoopFor(target: Target, rate: number, seconds: number): Promise<OpenLoopResult> {
  const pool = new Pool(target.origin, { connections: 256 });
  try {
    return await openLoop({ rate, seconds, send: (signal) => request(pool, target.path, signal) });
  } finally {
    await pool.close();
  }
}

function latencyOf(rounds: OpenLoopResult[]): Latency {
  const all = rounds.flatMap((r) => r.latenciesMs);
  return {
    p50: percentile(all, 50),
    p99: percentile(all, 99),
    failed: rounds.reduce((n, r) => n + r.failed, 0),
    errors: rounds.flatMap((r) => r.errors).slice(0, 5),
    maxLagMs: Math.max(...rounds.map((r) => r.maxLagMs)),
  };
}

/** `connections` closed loops, each sending its next request when the last answered. */
async function closedLoop(target: Target, connections: number, seconds: number): Promise<{ done: number; failed: number; elapsed: number }> {
  const pool = new Pool(target.origin, { connections });
  let done = 0;
  let failed = 0;
  const run = async (until: number) => {
    while (performance.now() < until) {
      try {
        await request(pool, target.path);
        done += 1;
      } catch {
        failed += 1;
      }
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: connections }, () => run(t0 + seconds * 1000)));
  const elapsed = (performance.now() - t0) / 1000;
  await pool.close();
  return { done, failed, elapsed };
}

const ms = (x: number) => (Number.isFinite(x) ? `${x.toFixed(2)} ms` : 'n/a');
const row = (cells: string[]) => process.stdout.write(`${cells.map((c, i) => (i === 0 ? c.padEnd(24) : c.padStart(13))).join(' ')}\n`);
const verdict = (holds: boolean | null) => (holds === null ? 'n/a' : holds ? 'holds' : 'MISSED');

const scratch = await mkdtemp(join(tmpdir(), 'troupe-bench-nginx-'));
try {
  const nginx = findNginx();
  const replica = await start(process.execPath, ['-e', REPLICA], /replica on (\S+)/);
  const replicaPid = lastChild();
  const targets: Target[] = [{ name: 'direct', origin: replica, path: '/v1/chat/completions', pids: () => [replicaPid] }];
  for (const workers of values['gateway-workers'].split(',').map(Number)) {
    const gateway = await startGateway(replica, root, workers);
    const gatewayPid = lastChild();
    if (process.env.GATEWAY_PERF && workers === 1) process.stdout.write(`gateway pid ${gatewayPid}: perf record -g -p ${gatewayPid}\n`);
    // A clustered gateway's CPU is its primary's and its workers'.
    targets.push({ name: workers > 1 ? `gateway×${workers}` : 'gateway', origin: gateway, path: '/services/bench/v1/chat/completions', pids: () => [gatewayPid, ...childrenOf(gatewayPid)] });
  }
  if (values.baseline !== undefined) {
    const baseline = await startGateway(replica, values.baseline);
    const baselinePid = lastChild();
    targets.push({ name: 'baseline', origin: baseline, path: '/services/bench/v1/chat/completions', pids: () => [baselinePid] });
  }
  if (nginx) {
    const origin = await startNginx(nginx.bin, replica, scratch);
    const nginxPid = lastChild();
    targets.push({ name: 'nginx', origin, path: '/services/bench/v1/chat/completions', pids: () => [nginxPid, ...childrenOf(nginxPid)] });
  }

  process.stdout.write(
    `gateway bench: ${new Date().toISOString()}, node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), load average ${loadAverage()}\n` +
      (values.baseline !== undefined ? `  baseline: the gateway of ${values.baseline}\n` : '') +
      `  ${nginx ? `nginx ${nginx.version}, worker_processes ${values['nginx-workers']}, keepalive upstream` : 'nginx: not installed (scripts/setup.sh --bench installs it); its columns are left out'}\n` +
      `  GET of a 100-byte JSON answer; open loop ${SECONDS} s a case (latency from the scheduled send time), closed loop ${CONNECTIONS} connections ${CLOSED_SECONDS} s a case; each case in ${ROUNDS} rounds alternating the targets\n\n`,
  );
  // Warm every path (JIT, connections) before anything is recorded.
  for (const t of targets) await closedLoop(t, 8, 1);

  const latency = new Map<string, Latency>();
  const key = (rate: number, name: string) => `${rate}/${name}`;
  const perRequest = (cpu: number, requests: number) => `${((cpu / requests) * 1e6).toFixed(0)} µs`;
  row(['open loop', 'p50', 'p99', 'added p50', 'added p99', 'failed', 'max lag', 'cpu/req']);
  for (const rate of RATES) {
    const rounds = await inRounds(targets, (t, seconds) => openLoopFor(t, rate, seconds), SECONDS);
    for (const t of targets) {
      const measured = rounds.get(t.name) ?? { rounds: [], cpu: 0 };
      const l = latencyOf(measured.rounds);
      latency.set(key(rate, t.name), l);
      const direct = latency.get(key(rate, 'direct')) as Latency;
      const added = t.name === 'direct' ? ['', ''] : [ms(l.p50 - direct.p50), ms(l.p99 - direct.p99)];
      const sent = measured.rounds.reduce((n, r) => n + r.sent, 0);
      row([`${rate} rps ${t.name}`, ms(l.p50), ms(l.p99), ...added, String(l.failed), ms(l.maxLagMs), perRequest(measured.cpu, sent)]);
      if (l.errors.length > 0) process.stdout.write(`  first errors: ${l.errors.join('; ')}\n`);
    }
  }

  process.stdout.write('\n');
  const throughput = new Map<string, number>();
  row([`closed loop, ${CONNECTIONS} conns`, 'req/s', 'failed', 'cpu/req']);
  const closed = await inRounds(targets, (t, seconds) => closedLoop(t, CONNECTIONS, seconds), CLOSED_SECONDS);
  for (const t of targets) {
    const { rounds, cpu } = closed.get(t.name) ?? { rounds: [], cpu: 0 };
    const done = rounds.reduce((n, r) => n + r.done, 0);
    const rps = done / rounds.reduce((n, r) => n + r.elapsed, 0);
    throughput.set(t.name, rps);
    row([t.name, rps.toFixed(0), String(rounds.reduce((n, r) => n + r.failed, 0)), perRequest(cpu, done)]);
  }

  process.stdout.write('\n');
  const added = (rate: number, name: string, q: 'p50' | 'p99') => {
    const l = latency.get(key(rate, name));
    const d = latency.get(key(rate, 'direct'));
    return l && d ? l[q] - d[q] : Number.NaN;
  };
  const ratio = (a: number, b: number) => (Number.isFinite(a / b) && b > 0 ? `${(a / b).toFixed(2)}×` : 'n/a');
  const gateways = targets.filter((t) => t.name !== 'direct' && t.name !== 'nginx').map((t) => t.name);
  for (const name of gateways) {
    row(['summary', name, 'nginx', `${name}/nginx`, 'target', '']);
    for (const rate of RATES) {
      for (const q of ['p50', 'p99'] as const) {
        const g = added(rate, name, q);
        const n = added(rate, 'nginx', q);
        const target = q === 'p99' && rate === TARGET_RATE ? `≤ ${TARGET_P99_ADDED_MS} ms` : '';
        // A negative difference is the machine's noise outweighing the proxy: no verdict from it.
        row([`added ${q} at ${rate} rps`, ms(g), ms(n), ratio(g, n), target, target ? verdict(g >= 0 ? g <= TARGET_P99_ADDED_MS : null) : '']);
      }
    }
    const g = throughput.get(name) ?? Number.NaN;
    const n = throughput.get('nginx') ?? Number.NaN;
    const share = g / n;
    row([
      `max req/s, ${CONNECTIONS} conns`,
      g.toFixed(0),
      Number.isFinite(n) ? n.toFixed(0) : 'n/a',
      Number.isFinite(share) ? `${(share * 100).toFixed(0)} %` : 'n/a',
      `≥ ${TARGET_THROUGHPUT_SHARE * 100} %`,
      verdict(Number.isFinite(share) ? share >= TARGET_THROUGHPUT_SHARE : null),
    ]);
  }
  process.stdout.write(`  (direct: ${(throughput.get('direct') ?? Number.NaN).toFixed(0)} req/s; load average now ${loadAverage()})\n`);
} finally {
  // SIGTERM: the gateway stops cleanly (and writes its CPU profile), nginx does a fast shutdown.
  await Promise.all(
    children.map((child) => {
      if (child.exitCode !== null || child.signalCode !== null) return undefined;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      return Promise.race([exited, sleep(5000)]);
    }),
  );
  await rm(scratch, { recursive: true, force: true });
}
