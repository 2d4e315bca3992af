import { existsSync, readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from './hosts/command';
import { createTestHosts, type TestHosts } from './hosts';

/** The harness itself, checked with OpenSSH's own client: what the SSH backend tests stand on. */

function ssh(hosts: TestHosts, name: string, command: string, extra: string[] = []): Promise<string> {
  const host = hosts.host(name);
  return run('ssh', [
    '-i', hosts.clientKeyPath,
    '-o', `UserKnownHostsFile=${hosts.knownHostsFile}`,
    '-o', 'StrictHostKeyChecking=yes',
    '-o', 'BatchMode=yes',
    '-o', 'ConnectTimeout=5',
    '-p', String(host.port),
    ...extra,
    `root@${host.address}`,
    command,
  ]);
}

describe('test hosts harness', () => {
  let hosts: TestHosts;
  let namespaces: string[];

  beforeAll(async () => {
    hosts = await createTestHosts([
      { name: 'cpu' },
      { name: 'l40s', gpus: { name: 'NVIDIA L40S', memoryMiB: 46068, count: 1 } },
      { name: 'mi300', vendor: 'amd', gpus: { name: 'AMD Instinct MI300X', memoryMiB: 196592, count: 2 }, port: 2222 },
      { name: 'hidden', behindJump: 'cpu' },
      { name: 'plain', skipBashrc: true },
    ]);
    namespaces = Object.values(hosts.hosts).map((h) => h.namespace);
  });

  afterAll(async () => {
    await hosts?.destroy();
  });

  it('gives each host its own sshd, host key and fake GPU tools', async () => {
    expect(await ssh(hosts, 'l40s', 'nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits')).toBe('NVIDIA L40S, 46068\n');
    expect(await ssh(hosts, 'cpu', 'command -v nvidia-smi || echo none')).toBe('none\n');
    const amd = JSON.parse(await ssh(hosts, 'mi300', 'amd-smi static --asic --vram --json')) as Array<{ asic: { market_name: string } }>;
    expect(amd.map((g) => g.asic.market_name)).toEqual(['AMD Instinct MI300X', 'AMD Instinct MI300X']);
    expect(await ssh(hosts, 'mi300', 'hostname -I')).toContain(hosts.host('mi300').address);
    const fingerprints = new Set(Object.values(hosts.hosts).map((h) => h.hostKeyFingerprint));
    expect(fingerprints.size).toBe(5);
    // skipBashrc: the session keeps sshd's own PATH, untouched by ~/.bashrc.
    expect(await ssh(hosts, 'plain', 'echo "$PATH"')).toBe('/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n');
    const printed = await run('ssh-keygen', ['-l', '-f', hosts.knownHostsFile]);
    for (const h of Object.values(hosts.hosts)) expect(printed).toContain(h.hostKeyFingerprint);
  });

  it('reaches a host behind a jump only through that jump', async () => {
    const hidden = hosts.host('hidden');
    await expect(ssh(hosts, 'hidden', 'true')).rejects.toThrow(/No route to host|unreachable/i);
    const jump = hosts.host('cpu');
    const viaJump = await ssh(hosts, 'hidden', 'hostname -I', [
      '-o', `ProxyCommand=ssh -i ${hosts.clientKeyPath} -o UserKnownHostsFile=${hosts.knownHostsFile} -o BatchMode=yes -W %h:%p root@${jump.address}`,
    ]);
    expect(viaJump.trim()).toBe(hidden.address);
    // Nor can a sibling host reach it: only the jump host's namespace has the route.
    await expect(ssh(hosts, 'l40s', `timeout 3 bash -c 'echo > /dev/tcp/${hidden.address}/22'`)).rejects.toThrow();
  });

  it('refuses a client key it does not know', async () => {
    const stranger = await hosts.generateClientKey('stranger');
    const host = hosts.host('cpu');
    await expect(
      run('ssh', ['-i', stranger, '-o', `UserKnownHostsFile=${hosts.knownHostsFile}`, '-o', 'BatchMode=yes', '-o', 'IdentitiesOnly=yes', `root@${host.address}`, 'true']),
    ).rejects.toThrow(/Permission denied/);
  });

  it('changes a host key on request and lists job processes', async () => {
    const before = hosts.host('l40s').hostKeyFingerprint;
    await hosts.changeHostKey('l40s');
    expect(hosts.host('l40s').hostKeyFingerprint).not.toBe(before);
    await expect(ssh(hosts, 'l40s', 'true')).rejects.toThrow(/REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed/);

    expect(await hosts.jobProcesses('cpu')).toEqual([]);
    await ssh(hosts, 'cpu', 'setsid sleep 300 </dev/null >/dev/null 2>&1 & echo started');
    // Started in the background: `setsid` may not have become `sleep` yet when the session returns.
    let procs = await hosts.jobProcesses('cpu');
    for (const deadline = Date.now() + 10_000; procs.some((p) => p.command !== 'sleep 300') && Date.now() < deadline; ) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      procs = await hosts.jobProcesses('cpu');
    }
    expect(procs.map((p) => p.command)).toEqual(['sleep 300']);
    process.kill(procs[0]!.pid, 'SIGKILL');
  });

  it('stops a host: link down, every process gone', async () => {
    await ssh(hosts, 'mi300', 'setsid sleep 300 </dev/null >/dev/null 2>&1 & echo started');
    expect(await hosts.jobProcesses('mi300')).toHaveLength(1);
    await hosts.stopHost('mi300');
    expect(await hosts.jobProcesses('mi300')).toEqual([]);
    await expect(ssh(hosts, 'mi300', 'true')).rejects.toThrow();
  });

  it('a second harness at once (another checkout, another test file) gets a network of its own', async () => {
    const other = await createTestHosts([{ name: 'cpu' }, { name: 'hidden', behindJump: 'cpu' }]);
    try {
      expect(other.network.bridge).not.toBe(hosts.network.bridge);
      expect(other.network.subnet).not.toBe(hosts.network.subnet);
      const addresses = (h: TestHosts) => Object.values(h.hosts).map((x) => x.address);
      expect(addresses(other).filter((a) => addresses(hosts).includes(a))).toEqual([]);
      // Each run's client reaches its own hosts, whose keys its known_hosts holds (no HOST KEY CHANGED).
      expect(await ssh(other, 'cpu', 'hostname -I')).toContain(other.host('cpu').address);
      expect(await ssh(hosts, 'cpu', 'hostname -I')).toContain(hosts.host('cpu').address);
      const viaJump = ['-o', `ProxyCommand=ssh -i ${other.clientKeyPath} -o UserKnownHostsFile=${other.knownHostsFile} -o BatchMode=yes -W %h:%p root@${other.host('cpu').address}`];
      expect(await ssh(other, 'hidden', 'hostname -I', viaJump)).toContain(other.host('hidden').address);
    } finally {
      await other.destroy();
    }
  });

  it('destroy removes every namespace, link, the bridge and its route', async () => {
    const { bridge, links, subnet } = hosts.network;
    expect(links.length).toBeGreaterThan(0);
    await hosts.destroy();
    const left = existsSync('/run/netns') ? readdirSync('/run/netns') : [];
    for (const ns of namespaces) expect(left).not.toContain(ns);
    const linkNames = (await run('ip', ['-br', 'link'])).split('\n').map((l) => l.split(/[\s@]/)[0]);
    expect(linkNames.filter((l) => l === bridge || links.includes(l ?? ''))).toEqual([]);
    const routes = (await run('ip', ['route', 'show', 'type', 'unreachable'])).split('\n').map((l) => l.split(' ')[1] ?? '');
    expect(routes.filter((r) => r.startsWith(`${subnet.slice(0, -'/24'.length)}/`))).toEqual([]);
  });
});
