import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { privateKeysUnder, sshServersUnder, twoNodeTask } from '../helpers/inter-node-ssh';
import { nodeSshPort } from '../../src/backends/ssh/node-ssh-port';
import { applyFleetYaml, expectAllClean, fleetYaml, startSshFleetEnv, waitForRun, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * Inter-node SSH on an SSH fleet: the MPI example (a CPU launcher beside two GPU worker groups,
 * 1 + 2 + 1 hosts, two fake GPUs each) with its unchanged `mpirun --hostfile $DSTACK_MPI_HOSTFILE`.
 * Each job's SSH server listens on a port of its own on its host; the host's sshd is not touched.
 */

const GPUS = { name: 'NVIDIA L40S', memoryMiB: 46068, count: 2 };
const example = fileURLToPath(new URL('../../examples/mpi-allreduce-local.yml', import.meta.url));
const hostNames = ['cpu', 'gpu-a1', 'gpu-a2', 'gpu-b'];
/** SSH hosts offer their free disk (as dstack's do): the default 100GB.. asks for more than a test machine has. */
const SMALL_DISK = { disk: '1GB..' };

let env: SshFleetEnv;
const fleetsMade: string[] = [];
const savedKnownHosts = process.env.TROUPE_KNOWN_HOSTS;

beforeAll(async () => {
  env = await startSshFleetEnv([{ name: 'cpu' }, ...hostNames.slice(1).map((name) => ({ name, gpus: GPUS }))]);
  // No known_hosts knows the test hosts: their keys are pinned at first contact.
  process.env.TROUPE_KNOWN_HOSTS = join(env.dir, 'known_hosts-empty');
});

afterAll(async () => {
  for (const name of fleetsMade) await env?.fleets.delete(name, { force: true }).catch(() => undefined);
  if (savedKnownHosts === undefined) delete process.env.TROUPE_KNOWN_HOSTS;
  else process.env.TROUPE_KNOWN_HOSTS = savedKnownHosts;
  await env?.close();
});

/**
 * The example with a disk request the test hosts' free space meets (SSH hosts offer their free
 * disk), and Debian's python (the one python3-mpi4py is for): the test hosts' jobs run as root,
 * whose PATH and .bashrc on this machine put a pyenv python without mpi4py first.
 */
function exampleForFleet(): string {
  const task = parse(readFileSync(example, 'utf8')) as { groups: Array<{ commands: string[]; resources: Record<string, unknown> }> };
  for (const group of task.groups) {
    group.resources = { ...group.resources, disk: '1GB..' };
    group.commands = group.commands.map((c) => c.replace(' python3 -c ', ' /usr/bin/python3 -c '));
  }
  expect(task.groups[0]?.commands[0]).toContain('/usr/bin/python3 -c');
  return stringify(task);
}

describe('inter-node SSH on an SSH fleet', () => {
  it('mpirun across a launcher host and three GPU hosts: every rank sums right, placed per the hostfile; nothing left after', async () => {
    const fleet = `mpi-ssh-${env.taskQueue.slice(-8)}`;
    fleetsMade.push(fleet);
    await applyFleetYaml(env, fleetYaml(env, fleet, hostNames));
    const run = `mpi-ssh-run-${env.taskQueue.slice(-8)}`;
    const handle = await env.troupe.submit({ yaml: exampleForFleet(), runName: run, fleets: [fleet] });
    const state = await handle.wait();
    const log = (await handle.readLog(0)).data;
    expect(state.status, log).toBe('DONE');
    const ips = state.jobs.map((j) => j.instance?.internal_ip);
    expect(ips[0]).toBe(env.hosts.host('cpu').address);
    expect(log).toContain(`${ips[0]}\n${ips[1]} slots=2\n${ips[2]} slots=2\n${ips[3]} slots=2\n`);
    const ranks = log
      .split('\n')
      .map((l) => l.match(/^rank (\d+)\/(\d+) on node (\d+) \(([\w-]+)\): sum (\d+)$/))
      .filter((m) => m !== null)
      .map((m) => ({ rank: Number(m[1]), size: Number(m[2]), node: Number(m[3]), group: m[4], sum: Number(m[5]) }))
      .sort((x, y) => x.rank - y.rank);
    const launcherSlots = ranks.filter((r) => r.node === 0).length;
    expect(launcherSlots).toBeGreaterThanOrEqual(1);
    const size = launcherSlots + 6;
    const groups = ['launcher', 'workers-a', 'workers-a', 'workers-b'];
    const nodeOf = [...Array<number>(launcherSlots).fill(0), 1, 1, 2, 2, 3, 3];
    expect(ranks).toEqual(nodeOf.map((node, rank) => ({ rank, size, node, group: groups[node], sum: (size * (size + 1)) / 2 })));

    await expectAllClean(env, fleet);
    const jobDirs = hostNames.map((n) => env.hosts.host(n).jobBaseDir);
    expect(sshServersUnder(jobDirs)).toEqual([]);
    expect(jobDirs.flatMap(privateKeysUnder)).toEqual([]);
  });

  it("a node of another run cannot log in to this run's nodes; a stopped run's servers are gone", async () => {
    const fleet = `mpi-ssh-neg-${env.taskQueue.slice(-8)}`;
    fleetsMade.push(fleet);
    await applyFleetYaml(env, fleetYaml(env, fleet, hostNames));
    const a = `ssh-a-${env.taskQueue.slice(-8)}`;
    await env.troupe.submit({ yaml: twoNodeTask(a, ['sleep infinity'], [], SMALL_DISK), runName: a, fleets: [fleet] });
    const running = await waitForRun(env, a, (s) => s.jobs.every((j) => j.status === 'RUNNING'));
    const jobDirs = hostNames.map((n) => env.hosts.host(n).jobBaseDir);
    expect(sshServersUnder(jobDirs)).toHaveLength(2);
    const otherIp = running.jobs[1]?.instance?.internal_ip ?? '';
    const otherPort = nodeSshPort(running.run_uid, 0, 1);

    const b = `ssh-b-${env.taskQueue.slice(-8)}`;
    const anyHostKey = '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5';
    const probe = [
      // Into run A's node with run B's own key (as the same fleet user): refused.
      `ssh ${anyHostKey} -p "$OTHER_PORT" "$OTHER_IP" true 2>&1 | tail -n 1; echo "other=\${PIPESTATUS[0]}"`,
      // With the run's own client config: A's host key is unknown, so it stops before logging in.
      'ssh -p "$OTHER_PORT" "$OTHER_IP" true 2>&1 | tail -n 1; echo "strict=${PIPESTATUS[0]}"',
      // Its own peer, by address, with no flags, in the peer's environment.
      'ssh "$(sed -n 2p <<< "$DSTACK_NODES_IPS")" \'echo "peer-rank=$DSTACK_NODE_RANK"\'',
    ];
    const taskB = twoNodeTask(b, probe, [`OTHER_IP=${otherIp}`, `OTHER_PORT=${otherPort}`], SMALL_DISK);
    const handleB = await env.troupe.submit({ yaml: taskB, runName: b, fleets: [fleet] });
    const stateB = await handleB.wait();
    const logB = (await handleB.readLog(0)).data;
    expect(stateB.status, logB).toBe('DONE');
    expect(logB).toMatch(/Permission denied \(publickey\)\.\r?\nother=255\r?\n/);
    expect(logB).toMatch(/Host key verification failed\.\r?\nstrict=255\r?\n/);
    expect(logB).toContain('peer-rank=1\n');
    // Run A's servers stayed up meanwhile; stopping the run ends them and removes their keys.
    expect(sshServersUnder(jobDirs)).toHaveLength(2);
    await env.troupe.run(a).stop();
    expect((await env.troupe.run(a).wait()).status).toBe('TERMINATED');
    await expectAllClean(env, fleet);
    expect(sshServersUnder(jobDirs)).toEqual([]);
    expect(jobDirs.flatMap(privateKeysUnder)).toEqual([]);
  });
});
