import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runDirectory } from '../../src/backends/ssh/job-paths';
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
    for (let i = 0; i < 3; i++) {
      const run = `shared-${i}-${env.taskQueue.slice(-6)}`;
      const handle = await env.troupe.submit({
        yaml: ['type: task', `name: ${run}`, 'nodes: 4', 'commands: [\'echo "hello from $DSTACK_NODE_RANK"\']', 'resources: {cpu: 1.., disk: 1GB..}', ''].join('\n'),
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
});
