import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { privateKeysUnder, sshServersUnder } from '../helpers/inter-node-ssh';
import { applyFleetYaml, expectAllClean, fleetYaml, startSshFleetEnv, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * Inter-node SSH on an SSH fleet: the MPI example (a CPU launcher beside two GPU worker groups,
 * 1 + 2 + 1 hosts, two fake GPUs each) with its unchanged `mpirun --hostfile $DSTACK_MPI_HOSTFILE`.
 * Each job's SSH server listens on a port of its own on its host; the host's sshd is not touched.
 */

const GPUS = { name: 'NVIDIA L40S', memoryMiB: 46068, count: 2 };
const example = fileURLToPath(new URL('../../examples/mpi-allreduce-local.yml', import.meta.url));
const hostNames = ['cpu', 'gpu-a1', 'gpu-a2', 'gpu-b'];

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
});
