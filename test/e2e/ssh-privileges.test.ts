import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { stringify } from 'yaml';
import type { RunState } from '../../src/client';
import { twoNodeTask } from '../helpers/inter-node-ssh';
import { logRefOf } from '../../src/client/job-attempts';
import { applyFleetYaml, expectAllClean, fleetYaml, startSshFleetEnv, waitForRun, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * Issue 37, part 2, on SSH hosts (real sshd hosts in network namespaces, SSH user root): every
 * process of a job — its commands, its readiness probe, an SSH session a peer opens on its node
 * (how mpirun reaches it) — runs with no_new_privs and cannot make a user namespace or mount a
 * file system, root as it is. (The script-building part and a host that cannot apply them:
 * test/unit/ssh-job-privileges.test.ts.)
 */

const isRoot = process.getuid?.() === 0;
const SMALL_DISK = { disk: '1GB..' };
let env: SshFleetEnv | undefined;
/** One fleet of both hosts for every test: each leaves it free and the hosts without job processes. */
let fleet = '';
let runs = 0;

beforeAll(async () => {
  if (!isRoot) return;
  env = await startSshFleetEnv([{ name: 'a' }, { name: 'b' }]);
  vi.stubEnv('TROUPE_KNOWN_HOSTS', env.hosts.knownHostsFile);
  fleet = `nnp-${env.taskQueue.slice(-8)}`;
  await applyFleetYaml(env, fleetYaml(env, fleet, ['a', 'b']));
}, 120_000);

afterEach(async () => {
  if (env) await expectAllClean(env, fleet);
});

afterAll(async () => {
  if (fleet) await env?.fleets.delete(fleet, { force: true });
  vi.unstubAllEnvs();
  await env?.close();
});

/** The test hosts' environment (made in beforeAll, as root). */
function sshEnv(): SshFleetEnv {
  if (!env) throw new Error('the SSH test hosts were not made');
  return env;
}

/** Submits the task `yaml(name)` to the fleet. */
async function submitOnFleet(prefix: string, yaml: (name: string) => string) {
  runs += 1;
  const name = `${prefix}-${runs}-${sshEnv().taskQueue.slice(-6)}`;
  return { name, handle: await sshEnv().troupe.submit({ yaml: yaml(name), runName: name, fleets: [fleet], checkWorkers: false }) };
}

/** Runs the task `yaml(name)` on a fresh fleet of both hosts; its end state and log. */
async function runOnFleet(prefix: string, yaml: (name: string) => string): Promise<{ state: RunState; log: string }> {
  const { name, handle } = await submitOnFleet(prefix, yaml);
  const state = await handle.wait();
  return { state, log: (await sshEnv().troupe.run(name).readLog(0)).data };
}

/** `name=value` lines of a log. */
function values(log: string): Record<string, string> {
  return Object.fromEntries(log.split('\n').flatMap((l) => {
    const m = /^([\w-]+)=(.*)$/.exec(l);
    return m ? [[m[1]!, m[2]!]] : [];
  }));
}

const NNP = "sed -n 's/^NoNewPrivs:[[:space:]]*//p' /proc/self/status";

describe.skipIf(!isRoot)("an SSH job's privileges (SSH user root)", () => {
  it('its commands and its readiness probe run with no_new_privs; unshare -Ur and mount -t tmpfs fail', async () => {
    // The probe leaves what it read beside the hostfile (the job's directory), where the commands wait for it.
    const mark = '"$DSTACK_MPI_HOSTFILE.probe"';
    const { state, log } = await runOnFleet('nnp', (name) =>
      stringify({
        type: 'task',
        name,
        groups: [{
          name: 'main',
          resources: SMALL_DISK,
          ready: { command: `${NNP} > ${mark}.tmp && mv ${mark}.tmp ${mark}`, interval: '200ms', timeout: '60s' },
          commands: [
          'echo "user=$(id -un)"',
          `echo "nnp=$(${NNP})"`,
          'unshare -Ur true 2>/dev/null; echo "userns=$?"',
          // In its own work directory; unmounted at once should it mount (the host's mount namespace, as root).
          'mkdir -p m && if mount -t tmpfs none m 2>/dev/null; then umount m; echo "mount=0"; else echo "mount=$?"; fi',
          `for i in $(seq 300); do [ -s ${mark} ] && break; sleep 0.1; done; echo "probe-nnp=$(cat ${mark})"`,
          ],
        }],
      }),
    );
    expect(state.status, `${JSON.stringify(state, null, 2)}\n${log}`).toBe('DONE');
    expect(log).not.toContain('not applied');
    expect(values(log)).toEqual({ user: 'root', nnp: '1', userns: '1', mount: '32', 'probe-nnp': '1' });
  });

  it("an SSH session a peer opens on a node (mpirun's way in) has no_new_privs and cannot unshare -Ur", async () => {
    const peer = '"$(sed -n 2p <<< "$DSTACK_NODES_IPS")"';
    const { state, log } = await runOnFleet('nnp-peer', (name) =>
      twoNodeTask(name, [
        `ssh ${peer} '${NNP.replace(/'/g, `'"'"'`)} | sed "s/^/peer-session-nnp=/"'`,
        `ssh ${peer} 'unshare -Ur true 2>/dev/null; echo "peer-session-userns=$?"'`,
      ], [], SMALL_DISK),
    );
    expect(state.status, `${JSON.stringify(state, null, 2)}\n${log}`).toBe('DONE');
    expect(values(log)).toMatchObject({ 'peer-session-nnp': '1', 'peer-session-userns': '1' });
  });

  it("what the worker runs on a job's node from outside it (peers hooks, probes through exec) has the same walls", async () => {
    const { name, handle } = await submitOnFleet('nnp-exec', (n) => stringify({ type: 'task', name: n, resources: SMALL_DISK, commands: ['sleep 300'] }));
    const running = await waitForRun(sshEnv(), name, (st) => st.status === 'RUNNING' && st.jobs[0]?.status === 'RUNNING');
    const ref = logRefOf(running, running.jobs[0]!, undefined);
    expect(ref).toBeTruthy();
    const seen = await sshEnv().backend.exec(ref!, `echo "nnp=$(${NNP}) userns=$(unshare -Ur true 2>/dev/null; echo $?)"`, 10_000);
    await handle.stop();
    await handle.wait();
    expect(seen).toEqual({ exit_code: 0, output: 'nnp=1 userns=1' });
  });
});
