import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import type { RunHandle } from '../../src/client';
import type { RunState } from '../../src/contract/run-state';
import { makeLocalFleet } from '../helpers/local-fleet';
import { useLocalTroupe } from '../helpers/local-troupe';

/**
 * The frameworks of README's "Frameworks" section, installed from the package index at pinned
 * versions (test/frameworks/requirements.txt, by scripts/frameworks-venv.sh: cached, so a second
 * run installs nothing), run unchanged on the local fleet as root (network namespaces, isolated
 * nodes): each framework finds every node at the node's own address, never 127.0.0.1, and after the
 * run nothing of it is left (no process, no /tmp file).
 */

const root = process.getuid?.() === 0;
const project = fileURLToPath(new URL('../..', import.meta.url));
const VENV = process.env.TROUPE_FRAMEWORKS_VENV ?? '/opt/troupe-test-venv';
const fleet = makeLocalFleet('troupe-frameworks-');
const env = useLocalTroupe(fleet);

beforeAll(() => {
  if (!root) return;
  execFileSync('bash', [`${project}/scripts/frameworks-venv.sh`], { stdio: 'inherit', env: { ...process.env, TROUPE_FRAMEWORKS_VENV: VENV }, timeout: 600_000 });
}, 600_000);

let n = 0;
async function run(example: string): Promise<{ handle: RunHandle; state: RunState; ips: string[] }> {
  const runName = `${example.replace(/\.yml$/, '')}-${++n}-${env.worker.taskQueue.slice(-6)}`;
  const handle = await env.troupe.submit({ file: `${project}/examples/frameworks/${example}`, runName, environ: { VENV } });
  const state = await handle.wait();
  return { handle, state, ips: state.jobs.map((j) => j.instance?.internal_ip ?? '?') };
}

async function logOf(handle: RunHandle, jobNum: number): Promise<string> {
  return (await handle.readLog(jobNum)).data;
}

/** Words after `prefix` on each line of `log` that starts with it. */
function field(log: string, prefix: string): string[] {
  return log.split('\n').filter((l) => l.startsWith(prefix)).map((l) => l.slice(prefix.length).trim().split(/\s+/)[0] ?? '');
}

/** Processes of this machine that run from the frameworks' virtualenv. */
function frameworkProcesses(): string[] {
  return readdirSync('/proc').filter((p) => /^\d+$/.test(p)).flatMap((pid) => {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      return cmd.includes(VENV) || /raylet|gcs_server|plasma_store/.test(cmd) ? [`${pid}: ${cmd.slice(0, 120)}`] : [];
    } catch {
      return [];
    }
  });
}

function expectNothingLeft(): void {
  expect(frameworkProcesses()).toEqual([]);
  // What the frameworks write to /tmp by default went to each node's own /tmp, gone with it.
  for (const left of ['/tmp/ray', '/tmp/dask-scratch-space']) expect(existsSync(left), left).toBe(false);
}

describe.skipIf(!root)('frameworks on the local fleet', () => {
  it('Ray: head, workers and driver in three groups; a task on every node, each at its own address; done when the driver is', async () => {
    const { handle, state, ips } = await run('ray-cluster.yml');
    const driver = state.jobs.find((j) => j.group_name === 'driver')!;
    const log = await logOf(handle, driver.job_num);
    expect(state.status, log).toBe('DONE');
    expect(field(log, 'ray node').sort()).toEqual([...ips].sort());
    expect(field(log, 'ray task on').sort()).toEqual([...ips].sort());
    expect(log).not.toContain('127.0.0.1');
    // group-done: the driver (the last group) ended the run; the head and the workers were stopped.
    expect(driver.exit_code).toBe(0);
    for (const job of state.jobs.filter((j) => j.group_name !== 'driver')) expect(job.status).toBe('TERMINATED');
    expectNothingLeft();
  });

  it('Dask: the scheduler and both workers at their own addresses; the client computes on both', async () => {
    const { handle, state, ips } = await run('dask-cluster.yml');
    const client = state.jobs.find((j) => j.group_name === 'client')!;
    const log = await logOf(handle, client.job_num);
    expect(state.status, log).toBe('DONE');
    const [schedulerIp, ...rest] = ips;
    const workerIps = rest.slice(0, 2);
    expect(field(log, 'dask scheduler')).toEqual([`tcp://${schedulerIp}:8786`]);
    expect(field(log, 'dask worker').map((a) => a.replace(/^tcp:\/\/|:\d+$/g, '')).sort()).toEqual([...workerIps].sort());
    expect(field(log, 'dask computed on').sort()).toEqual(['workers-0', 'workers-1']);
    expect(field(log, 'dask sum')).toEqual([String([0, 1, 2, 3, 4, 5, 6, 7].reduce((s, i) => s + i * i, 0))]);
    expectNothingLeft();
  });

  it('JAX (CPU): a collective across two groups gathers both processes; each at its own address', async () => {
    const { handle, state, ips } = await run('jax-distributed.yml');
    const logs = await Promise.all(state.jobs.map((j) => logOf(handle, j.job_num)));
    expect(state.status, logs.join('\n----\n')).toBe('DONE');
    logs.forEach((log, i) => {
      const host = i === 0 ? 'coordinator-0' : 'worker-0';
      expect(log).toContain(`jax process ${i}/2 on ${host} at ${ips[i]}: 2 devices, gathered [1, 2]`);
    });
    expectNothingLeft();
  });
});
