import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import type { JobRef } from '../../src/backends/backend';
import { HostKeyTrust, SshRunner } from '../../src/backends/ssh';
import { runDirectory } from '../../src/backends/ssh/job-paths';
import { renderLaunchScript } from '../../src/runner/launch-script';
import { applyFleetYaml, expectAllClean, fleetYaml, startSshFleetEnv, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * SSH hosts that share one home directory (an NFS home, as on many clusters): every host's jobs
 * are in one directory, and at a run's end every host cleans up at once. Each host touches its own
 * jobs alone; a path another host removed is not a failure; no host is taken for lost.
 */

const HOSTS = ['shared-a', 'shared-b', 'shared-c', 'shared-d'];
let env: SshFleetEnv;
const savedKnownHosts = process.env.TROUPE_KNOWN_HOSTS;
const fleet = 'shared-home';

beforeAll(async () => {
  env = await startSshFleetEnv(HOSTS.map((name) => ({ name })), { sharedHome: true });
  process.env.TROUPE_KNOWN_HOSTS = env.hosts.knownHostsFile;
});

afterEach(async () => {
  await expectAllClean(env, fleet);
});

afterAll(async () => {
  await env?.fleets.delete(fleet, { force: true }).catch(() => undefined);
  if (savedKnownHosts === undefined) delete process.env.TROUPE_KNOWN_HOSTS;
  else process.env.TROUPE_KNOWN_HOSTS = savedKnownHosts;
  await env?.close();
});

describe('SSH hosts that share a home directory', () => {
  it('runs 4-node runs one after another: each DONE, every host ready after it, only logs and exit codes left', async () => {
    const state = await applyFleetYaml(env, fleetYaml(env, fleet, HOSTS));
    expect(state.hosts.map((h) => h.status), JSON.stringify(state.hosts)).toEqual(['ready', 'ready', 'ready', 'ready']);
    const base = join(env.dir, 'home', '.troupe', 'jobs');
    // Each job leaves a few thousand files, so that the hosts' clean-ups (started together) overlap.
    for (let i = 0; i < 3; i++) {
      const run = `shared-${i}-${env.taskQueue.slice(-6)}`;
      const handle = await env.troupe.submit({
        yaml: ['type: task', `name: ${run}`, 'nodes: 4', 'commands: [\'mkdir -p many && (cd many && seq 1 3000 | xargs touch)\', \'echo "hello from $DSTACK_NODE_RANK"\']', 'resources: {cpu: 1.., disk: 1GB..}', ''].join('\n'),
        fleets: [fleet],
        checkWorkers: false,
        options: { stop_grace_s: 1 },
      });
      const ended = await handle.wait();
      expect(ended.status, JSON.stringify(ended, null, 2)).toBe('DONE');
      expect(ended.message ?? '').not.toMatch(/teardown incomplete/);
      const after = await env.fleets.state(fleet);
      expect(after?.hosts.map((h) => [h.spec.target.hostname, h.status]), JSON.stringify(after?.hosts)).toEqual(state.hosts.map((h) => [h.spec.target.hostname, 'ready']));
      const runDir = runDirectory(base, ended.run_uid);
      const files = execFileSync('find', ['.', '-mindepth', '1', '-type', 'f'], { cwd: runDir, encoding: 'utf8' }).split('\n').filter(Boolean).sort();
      expect(files.filter((f) => !/^\.\/0\/[^/]+\/(log|exit_code)$/.test(f))).toEqual(['./.released']);
      const logs = files.filter((f) => f.endsWith('/log')).map((f) => readFileSync(join(runDir, f), 'utf8').trim()).sort();
      expect(logs).toEqual([0, 1, 2, 3].map((n) => `hello from ${n}`));
    }
  }, 300_000);

  it("a host's clean-up leaves another host's job in the shared directory alone, and takes a vanished job directory as clean", async () => {
    const base = join(env.dir, 'home', '.troupe', 'jobs');
    const trust = new HostKeyTrust({ knownHostsFiles: [env.hosts.knownHostsFile] });
    const [a, b] = ['shared-a', 'shared-b'].map((name) => new SshRunner(env.hosts.target(name), { trust, baseDir: base })) as [SshRunner, SshRunner];
    const runId = `run-${randomUUID().slice(0, 8)}`;
    const job = (name: string, host: string): JobRef => ({
      run_id: runId, run_name: 'shared', submission: 0, job_num: 0, job_name: name,
      instance: { instance_id: `${runId}-${name}`, host, internal_ip: env.hosts.host(host).address, gpus: 0, details: {} },
    });
    const onA = job('job-a', 'shared-a');
    const onB = job('job-b', 'shared-b');
    for (const [r, j] of [[a, onA], [b, onB]] as const) {
      await r.startJob(j, { env: { DSTACK_NODE_RANK: '0' }, hostfile: '', script: renderLaunchScript({ commands: ['sleep 1000'], workingDir: null, image: null }) });
    }
    await a.stopJob(onA, 0);
    await a.cleanupRun(runId, undefined, [a.jobDirectory(onA)]);
    // B's job runs on, its files in place; A's are reduced to its log and exit code.
    expect((await b.jobState(onB)).state).toBe('running');
    expect(existsSync(join(b.jobDirectory(onB), 'job.env'))).toBe(true);
    expect(readdirSync(a.jobDirectory(onA)).sort()).toEqual(['exit_code', 'log']);
    // B's clean-up after its directory was removed (by another host, or by hand): nothing to do, no error.
    await b.stopJob(onB, 0);
    rmSync(b.jobDirectory(onB), { recursive: true, force: true });
    await b.cleanupRun(runId, undefined, [b.jobDirectory(onB)]);
    await a.cleanupRun(runId, undefined, [a.jobDirectory(onA), b.jobDirectory(onB)]);
  }, 60_000);
});
