import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connectSsh, HostKeyTrust } from '../../src/backends/ssh';
import { TroupeClient } from '../../src/client';
import { FleetClient } from '../../src/fleet/fleet-client';
import { fleetSpecOf } from '../../src/fleet/fleet-spec';
import { loadFleetConfig } from '../../src/plan';
import { uniqueTaskQueue } from '../helpers/temporal';
import { kill9 } from '../helpers/worker-process-control';
import { applyFleetYaml, expectAllClean, fleetYaml, startCliWorker, startSshFleetEnv, waitForRun, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * An SSH fleet at the scale of a small cluster: 64 real sshd hosts in network namespaces (8 CPU
 * hosts, 28 with an L40S, 28 with an A10G), one run of 64 nodes in 3 groups. While the jobs run
 * no command reaches any host (exits are pushed by the hosts' watchers); 8 hosts that lose their
 * network mid-run fail their jobs INSTANCE_UNREACHABLE and the other 56 are cleaned and freed
 * (last: those 8 stay down); a worker killed mid-start leaves the run to the next one, with every
 * job started once.
 */

const L40S = { name: 'NVIDIA L40S', memoryMiB: 46068, count: 1 };
const A10G = { name: 'NVIDIA A10G', memoryMiB: 23028, count: 1 };
const CPU_HOSTS = Array.from({ length: 8 }, (_, i) => `cpu-${i}`);
const L40S_HOSTS = Array.from({ length: 28 }, (_, i) => `l40s-${i}`);
const A10G_HOSTS = Array.from({ length: 28 }, (_, i) => `a10g-${i}`);
const ALL = [...CPU_HOSTS, ...L40S_HOSTS, ...A10G_HOSTS];

let env: SshFleetEnv;
let fleetName: string | null = null;
let counter = 0;
const savedKnownHosts = process.env.TROUPE_KNOWN_HOSTS;

beforeAll(async () => {
  env = await startSshFleetEnv([
    ...CPU_HOSTS.map((name) => ({ name })),
    ...L40S_HOSTS.map((name) => ({ name, gpus: L40S })),
    ...A10G_HOSTS.map((name) => ({ name, gpus: A10G })),
  ]);
  process.env.TROUPE_KNOWN_HOSTS = env.hosts.knownHostsFile;
}, 300_000);

afterEach(async () => {
  await expectAllClean(env, fleetName);
  if (fleetName) await env.fleets.delete(fleetName, { force: true });
  fleetName = null;
});

afterAll(async () => {
  if (savedKnownHosts === undefined) delete process.env.TROUPE_KNOWN_HOSTS;
  else process.env.TROUPE_KNOWN_HOSTS = savedKnownHosts;
  await env?.close();
}, 120_000);

function names(prefix: string): { fleet: string; run: string } {
  counter += 1;
  const suffix = `${counter}-${env.taskQueue.slice(-6)}`;
  fleetName = `${prefix}-${suffix}`;
  return { fleet: fleetName, run: `${prefix}-run-${suffix}` };
}

/** Router-like CPU head group, two GPU groups; each node records its rank, then runs `work`. */
function task(run: string, work: string): string {
  const record = `echo $DSTACK_NODE_RANK >> ${env.dir}/${run}.starts; ${work}`;
  return [
    'type: task',
    `name: ${run}`,
    'groups:',
    '  - name: head',
    '    nodes: 8',
    `    commands: ['${record}']`,
    '    resources: {cpu: 1.., disk: 1GB..}',
    '  - name: prefill',
    '    nodes: 28',
    `    commands: ['${record}']`,
    '    resources: {gpu: L40S, disk: 1GB..}',
    '  - name: decode',
    '    nodes: 28',
    `    commands: ['${record}']`,
    '    resources: {gpu: A10G, disk: 1GB..}',
    '',
  ].join('\n');
}

const starts = (run: string) => readFileSync(join(env.dir, `${run}.starts`), 'utf8').trim().split('\n').map(Number).sort((a, b) => a - b);

async function commandsSent(): Promise<number> {
  const trust = new HostKeyTrust({ knownHostsFiles: [env.hosts.knownHostsFile] });
  let sum = 0;
  for (const name of ALL) sum += (await connectSsh(env.hosts.target(name), trust)).commandsSent;
  return sum;
}

describe('an SSH fleet of 64 hosts', () => {
  it('runs 64 nodes in 3 groups DONE, each started once; no command reaches a host while the jobs run', async () => {
    const { fleet, run } = names('scale');
    const state = await applyFleetYaml(env, fleetYaml(env, fleet, ALL));
    expect(state.hosts.filter((h) => h.status === 'ready')).toHaveLength(64);
    // Each job waits for the test's word (a file on the disk the hosts share), then ends.
    const go = join(env.dir, `${run}.go`);
    const handle = await env.troupe.submit({ yaml: task(run, `while [ ! -e ${go} ]; do sleep 0.2; done`), fleets: [fleet], checkWorkers: false });
    await waitForRun(env, run, (s) => s.jobs.length === 64 && s.jobs.every((j) => j.status === 'RUNNING'), 180_000);
    // Each job is read once on its host, then its host's watcher vouches for it: wait for those
    // first reads to be over, then count the commands sent to all 64 hosts for 4 s.
    let before = await commandsSent();
    for (let i = 0; i < 20; i++) {
      await new Promise((r) => setTimeout(r, 1_000));
      const now = await commandsSent();
      if (now === before) break;
      before = now;
    }
    await new Promise((r) => setTimeout(r, 4_000));
    expect(await commandsSent()).toBe(before);
    writeFileSync(go, '');
    const final = await handle.wait();
    expect(final.status, final.message ?? '').toBe('DONE');
    expect(starts(run)).toEqual(Array.from({ length: 64 }, (_, i) => i));
    expect(new Set(final.jobs.map((j) => j.instance?.internal_ip)).size).toBe(64);
  }, 300_000);

  it('the worker killed with SIGKILL mid-start at 64 hosts: the next one finishes the run, every job started once', async () => {
    // `troupe worker` as a user runs it, on a task queue of its own (fleet and run workflows too).
    const taskQueue = uniqueTaskQueue('ssh-scale-kill');
    const fleets = new FleetClient(env.client, { taskQueue });
    const troupe = new TroupeClient(env.client, { taskQueue });
    const stateDir = mkdtempSync(join(tmpdir(), 'troupe-ssh-scale-worker-'));
    const start = () => startCliWorker({ TROUPE_TASK_QUEUE: taskQueue, TROUPE_STATE_DIR: stateDir, TROUPE_KNOWN_HOSTS: env.hosts.knownHostsFile });
    let worker = await start();
    const run = `kill-run-${taskQueue.slice(-6)}`;
    const fleet = `kill-${taskQueue.slice(-6)}`;
    try {
      const file = join(env.dir, `${fleet}.yml`);
      const yaml = fleetYaml(env, fleet, ALL);
      writeFileSync(file, yaml);
      await fleets.apply(fleetSpecOf(loadFleetConfig(yaml, file, { environ: {} }), file));
      const go = join(env.dir, `${run}.go`);
      const handle = await troupe.submit({ yaml: task(run, `while [ ! -e ${go} ]; do sleep 0.2; done`), fleets: [fleet], checkWorkers: false });
      // A query waits for the workflow's worker: while the killed one's tasks time out it may not
      // be answered (RunUnreachableError); ask again.
      const running = async (n: number) => {
        const deadline = Date.now() + 180_000;
        for (;;) {
          const state = await handle.state().catch((err: unknown) => {
            if (Date.now() > deadline) throw err;
            return null;
          });
          if (state && state.jobs.filter((j) => j.status === 'RUNNING').length >= n) return;
          await new Promise((r) => setTimeout(r, 100));
        }
      };
      await running(16);
      await kill9(worker);
      worker = await start();
      await running(64);
      writeFileSync(go, '');
      const final = await handle.wait();
      expect(final.status, final.message ?? '').toBe('DONE');
      expect(starts(run)).toEqual(Array.from({ length: 64 }, (_, i) => i));
      await expectAllClean({ ...env, fleets }, fleet);
      await fleets.delete(fleet, { force: true });
    } finally {
      // A failed test must not leave the run's 64 jobs behind for the next one.
      await troupe.run(run).abort().catch(() => undefined);
      await troupe.run(run).wait().catch(() => undefined);
      await kill9(worker);
      rmSync(stateDir, { recursive: true, force: true });
    }
  }, 300_000);

  it('8 hosts losing their network mid-run: their jobs fail INSTANCE_UNREACHABLE, the run is torn down, the other 56 hosts cleaned and freed', async () => {
    const { fleet, run } = names('lost');
    await applyFleetYaml(env, fleetYaml(env, fleet, ALL));
    const handle = await env.troupe.submit({ yaml: task(run, 'sleep 600'), fleets: [fleet], checkWorkers: false, options: { stop_grace_s: 2 } });
    const running = await waitForRun(env, run, (s) => s.jobs.length === 64 && s.jobs.every((j) => j.status === 'RUNNING'), 180_000);
    const lost = A10G_HOSTS.slice(0, 8);
    const lostIps = new Set(lost.map((name) => env.hosts.host(name).address));
    const lostAt = Date.now();
    await Promise.all(lost.map((name) => env.hosts.stopHost(name)));
    const final = await handle.wait();
    const took = Date.now() - lostAt;
    // The documented limit: 30 s without an answer; before it the connection's keepalive (0.5 s × 3
    // here) and a connect attempt (3 s here); after it the teardown of 64 jobs.
    expect(took).toBeLessThan(75_000);
    expect(final.status).toBe('FAILED');
    const failedJobs = final.jobs.filter((j) => j.termination_reason === 'INSTANCE_UNREACHABLE');
    expect(failedJobs.length).toBeGreaterThanOrEqual(1);
    for (const job of failedJobs) expect(lostIps.has(job.instance?.internal_ip ?? '')).toBe(true);
    for (const job of final.jobs.filter((j) => !lostIps.has(j.instance?.internal_ip ?? ''))) {
      expect(job.termination_reason).toBe('TERMINATED_BY_SERVER');
    }
    expect(starts(run)).toEqual(Array.from({ length: 64 }, (_, i) => i));
    expect(running.jobs).toHaveLength(64);
    const fleetState = await env.fleets.state(fleet);
    const byStatus = (status: string) => fleetState?.hosts.filter((h) => h.status === status && h.holder === null).length;
    expect(byStatus('ready')).toBe(56);
    expect(byStatus('unreachable')).toBe(8);
  }, 300_000);
});
