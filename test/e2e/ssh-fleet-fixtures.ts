import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Client } from '@temporalio/client';
import { expect } from 'vitest';
import { closeAllSshSessions } from '../../src/backends/ssh';
import { SshBackend } from '../../src/fleet/ssh-backend';
import { RunUnreachableError, TroupeClient, type RunState } from '../../src/client';
import { loadFleetConfig } from '../../src/plan';
import { FleetClient } from '../../src/fleet/fleet-client';
import { fleetSpecOf } from '../../src/fleet/fleet-spec';
import type { FleetState } from '../../src/contract/fleet-messages';
import { temporalAddress, testClient, uniqueTaskQueue } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';
import type { GatewayProcess } from '../helpers/gateway-process';
import { kill9 } from '../helpers/worker-process-control';
import { createTestHosts, jobDirOfTestHost, testHostsFleetYaml, type TestHostSpec, type TestHosts } from './hosts';

/**
 * SSH fleets end to end: real sshd hosts (test/e2e/hosts), the real dev server, and a real worker
 * whose `ssh` backend reaches the hosts; fleets are made from YAML as a user writes it.
 */

/** Short SSH deadlines, so a lost host shows in seconds rather than the default 15 s. */
export const FAST_SSH = { keepaliveIntervalMs: 500, keepaliveCountMax: 3, connectMs: 3_000, handshakeMs: 5_000 };

export interface SshFleetEnv {
  hosts: TestHosts;
  client: Client;
  fleets: FleetClient;
  /** The worker's SSH backend (what a reaper of this worker would release through). */
  backend: SshBackend;
  troupe: TroupeClient;
  taskQueue: string;
  /** A folder for configs and files the test's jobs write (the hosts share this machine's disk). */
  dir: string;
  close(): Promise<void>;
}

export interface SshFleetEnvOptions {
  /**
   * Every host's jobs in one directory, as hosts that share an NFS home directory have them
   * (`~/.troupe/jobs` is then one directory for all): `<dir>/home/.troupe/jobs`.
   */
  sharedHome?: boolean;
}

export async function startSshFleetEnv(specs: TestHostSpec[], options: SshFleetEnvOptions = {}): Promise<SshFleetEnv> {
  const hosts = await createTestHosts(specs.map((s) => ({ skipBashrc: true, ...s })));
  const dir = mkdtempSync(join(tmpdir(), 'troupe-ssh-fleet-'));
  const { client, close: closeClient } = await testClient();
  const taskQueue = uniqueTaskQueue('ssh-fleet');
  const fleets = new FleetClient(client, { taskQueue });
  const jobDirOfHost = jobDirOfTestHost(hosts);
  const backend = new SshBackend({
    fleets,
    timeouts: FAST_SSH,
    unreachableLimitMs: 3_000,
    releaseGraceSeconds: 2,
    // The hosts share one disk: each keeps its jobs apart, as separate machines would (unless they share a home).
    jobBaseDir: (target) => (options.sharedHome ? join(dir, 'home', '.troupe', 'jobs') : jobDirOfHost(target)),
  });
  const worker = await startTroupeWorker({ ssh: backend }, taskQueue);
  const troupe = new TroupeClient(client, { taskQueue });
  return {
    hosts,
    client,
    fleets,
    backend,
    troupe,
    taskQueue,
    dir,
    async close() {
      await worker.stop();
      await closeAllSshSessions();
      await closeClient();
      await hosts.destroy();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A fleet config as a user writes it, for some of the harness hosts (a hidden host gets its proxy_jump). */
export function fleetYaml(env: SshFleetEnv, name: string, hostNames: string[], placement: 'any' | 'cluster' = 'any'): string {
  return testHostsFleetYaml(env.hosts, name, hostNames, placement);
}

/** Writes the YAML to a file and applies it through the fleet's workflow (what `troupe fleet apply` does). */
export async function applyFleetYaml(env: SshFleetEnv, yaml: string): Promise<FleetState> {
  const file = join(env.dir, `fleet-${Date.now()}-${Math.random().toString(36).slice(2, 8)}.yml`);
  writeFileSync(file, yaml);
  return await env.fleets.apply(fleetSpecOf(loadFleetConfig(yaml, file, { environ: {} }), file));
}

/**
 * What must hold after every test: no job process on any host, and every host of the fleet free
 * (no holder). Waits a little: the run's teardown may still be finishing.
 */
export async function expectAllClean(env: SshFleetEnv, fleetName: string | null): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const left: Record<string, string[]> = {};
    for (const name of Object.keys(env.hosts.hosts)) {
      const procs = await env.hosts.jobProcesses(name);
      if (procs.length > 0) left[name] = procs.map((p) => `${p.pid} ${p.command}`);
    }
    const state = fleetName ? await env.fleets.state(fleetName) : null;
    const held = state ? state.hosts.filter((h) => h.holder !== null).map((h) => `${h.spec.target.hostname} by ${h.holder?.run_name}`) : [];
    if ((Object.keys(left).length === 0 && held.length === 0) || Date.now() > deadline) {
      expect(left, 'job processes left on hosts').toEqual({});
      expect(held, 'hosts still held in the fleet').toEqual([]);
      return;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Waits until the run's state satisfies `done`; returns that state. A query left unanswered while
 * a killed worker's tasks time out (RunUnreachableError) is asked again.
 */
export async function waitForRun(env: Pick<SshFleetEnv, 'troupe'>, runName: string, done: (s: RunState) => boolean, timeoutMs = 90_000): Promise<RunState> {
  const handle = env.troupe.run(runName);
  const deadline = Date.now() + timeoutMs;
  let last: RunState | null = null;
  while (Date.now() < deadline) {
    try {
      last = await handle.state();
    } catch (err) {
      if (!(err instanceof RunUnreachableError)) throw err;
      continue;
    }
    if (done(last)) return last;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`run ${runName} never reached the expected state; last: ${JSON.stringify(last, null, 2)}`);
}

/** `export NAME='value'` lines of a job.env, read by bash itself. */
export function readEnvFile(path: string): Record<string, string> {
  const out = spawnSync('bash', ['--noprofile', '--norc', '-c', 'set -a; . "$1"; env -0', 'read-env', path], { env: {} });
  const env: Record<string, string> = {};
  for (const entry of out.stdout.toString('utf8').split('\0')) {
    const eq = entry.indexOf('=');
    if (eq > 0) env[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  return env;
}

export interface JobFilesSeen {
  env: Record<string, string>;
  hostfile: string;
  /** The job's directory on its host. */
  dir: string;
}

/**
 * Copies each job's job.env and hostfile as soon as they appear in the hosts' job directories
 * (the hosts share this machine's disk): teardown removes them once the run ends.
 */
export function watchJobFiles(env: SshFleetEnv, hostNames: string[]): { seen: Map<string, JobFilesSeen>; stop: () => void } {
  const seen = new Map<string, JobFilesSeen>();
  const look = () => {
    for (const name of hostNames) {
      const base = env.hosts.host(name).jobBaseDir;
      for (const run of safeList(base)) {
        for (const submission of safeList(join(base, run))) {
          for (const job of safeList(join(base, run, submission))) {
            const dir = join(base, run, submission, job);
            if (seen.has(job) || !existsSync(join(dir, 'started'))) continue;
            try {
              seen.set(job, { env: readEnvFile(join(dir, 'job.env')), hostfile: readFileSync(join(dir, 'hostfile'), 'utf8'), dir });
            } catch {
              // written a moment later
            }
          }
        }
      }
    }
  };
  const timer = setInterval(look, 30);
  return { seen, stop: () => clearInterval(timer) };
}

function safeList(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

const cli = fileURLToPath(new URL('../../bin/troupe.js', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** The real `troupe` CLI in a child process, against the test's dev server and task queue. */
export function troupeCli(env: SshFleetEnv, args: string[]): Promise<CliResult> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, ...args], {
      env: { ...process.env, TEMPORAL_ADDRESS: temporalAddress(), TROUPE_TASK_QUEUE: env.taskQueue, NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr, ms: Date.now() - started }));
  });
}

/** `troupe worker` in its own process (the CLI as users run it), resolved once it polls; `extraArgs` such as `--metrics HOST:PORT`. */
export async function startCliWorker(extraEnv: Record<string, string>, extraArgs: string[] = []): Promise<ChildProcess> {
  const child = spawn(process.execPath, [cli, 'worker', '--backend', 'ssh', ...extraArgs], {
    env: { ...process.env, TEMPORAL_ADDRESS: temporalAddress(), ...extraEnv },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  await new Promise<void>((resolve, reject) => {
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (process.env.DEBUG_WORKER) process.stderr.write(chunk);
      if (stderr.includes('Troupe worker on')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`troupe worker exited early (${code}): ${stderr}`)));
  });
  return child;
}


/**
 * `troupe worker --gateway` pushing to a `troupe gateway` of this env, on the test file's own task queue
 * (the env's in-process worker pushes to no gateway); started again the same way after a test kills it.
 */
export function startGatewayCliWorker(env: SshFleetEnv, taskQueue: string, gateway: Pick<GatewayProcess, 'adminUrl' | 'adminTokenFile'>): Promise<ChildProcess> {
  return startCliWorker({ TROUPE_TASK_QUEUE: taskQueue, TROUPE_STATE_DIR: join(env.dir, 'state'), TROUPE_KNOWN_HOSTS: env.hosts.knownHostsFile }, [
    '--gateway',
    gateway.adminUrl,
    '--gateway-token-file',
    gateway.adminTokenFile,
  ]);
}

/**
 * A services test file's end: only what a failed test left going — its runs still live stopped (aborted)
 * and waited for, its fleets deleted — then the processes it started killed by pid, and the env closed.
 */
export async function closeServiceEnv(
  env: SshFleetEnv | undefined,
  taskQueue: string,
  left: { runs: string[]; fleets: string[]; processes: Array<ChildProcess | undefined> },
): Promise<void> {
  if (env) {
    const troupe = new TroupeClient(env.client, { taskQueue });
    const fleets = new FleetClient(env.client, { taskQueue });
    for (const run of left.runs) {
      const state = await troupe.run(run).state().catch(() => null);
      if (state && !['DONE', 'FAILED', 'TERMINATED'].includes(state.status)) {
        await troupeCli({ ...env, taskQueue }, ['stop', run, '-x', '-y']);
        await troupe.run(run).wait().catch(() => undefined);
      }
    }
    for (const fleet of left.fleets) await fleets.delete(fleet, { force: true }).catch(() => undefined);
  }
  for (const child of left.processes) if (child) await kill9(child);
  await env?.close();
}
