import { chmod, copyFile, writeFile } from 'node:fs/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  closeAllSshSessions,
  connectSsh,
  detectHost,
  gpuCount,
  HostKeyTrust,
  pickInternalIp,
  SshAuthenticationError,
  SshConnectionLostError,
  SshConnectionRefusedError,
  SshHostKeyChangedError,
  SshHostKeyUnknownError,
  SshHostUnreachableError,
  SshKeyFileError,
  SshTimeoutError,
} from '../../src/backends/ssh';
import { run } from './hosts/command';
import { createTestHosts, type TestHosts } from './hosts';

/** Connections, host key verification and detection against real sshd hosts (test/e2e/hosts). */

const fast = { keepaliveIntervalMs: 500, keepaliveCountMax: 3, connectMs: 3_000, handshakeMs: 3_000, commandMs: 20_000 };

describe('SSH connections and host detection', () => {
  let hosts: TestHosts;

  beforeAll(async () => {
    hosts = await createTestHosts([
      { name: 'cpu' },
      { name: 'l40s', gpus: { name: 'NVIDIA L40S', memoryMiB: 46068, count: 1 } },
      { name: 'h100x8', gpus: { name: 'NVIDIA H100 80GB HBM3', memoryMiB: 81559, count: 8 } },
      { name: 'mi300', vendor: 'amd', gpus: { name: 'AMD Instinct MI300X', memoryMiB: 196592, count: 4 }, port: 2222 },
      { name: 'hidden', behindJump: 'cpu', gpus: { name: 'NVIDIA L40S', memoryMiB: 46068, count: 2 } },
      { name: 'lost' },
      { name: 'frozen' },
      { name: 'rekeyed' },
    ]);
  });

  afterEach(async () => {
    await closeAllSshSessions();
  });

  afterAll(async () => {
    await closeAllSshSessions();
    await hosts?.destroy();
  });

  const knownHostsTrust = (): HostKeyTrust => new HostKeyTrust({ knownHostsFiles: [hosts.knownHostsFile] });

  it('connects with a known_hosts entry and detects a one-L40S host', async () => {
    const session = await connectSsh(hosts.target('l40s'), knownHostsTrust());
    expect(session.hostKey).toMatchObject({ trustedBy: 'known_hosts', fingerprint: hosts.host('l40s').hostKeyFingerprint, algorithm: 'ssh-ed25519' });
    const facts = await detectHost(session, { baseDir: hosts.host('l40s').jobBaseDir });
    expect(facts.gpus).toEqual([{ vendor: 'nvidia', name: 'L40S', raw_name: 'NVIDIA L40S', memory_mib: 46068, memory_gb: 45, count: 1 }]);
    expect(facts.cpus).toBeGreaterThan(0);
    expect(facts.memory_gb).toBeGreaterThan(0);
    expect(facts.disk_gb).toBeGreaterThan(0);
    expect(facts.arch).toBe('x86');
    expect(facts.home).toBe('/root');
    expect(facts.addresses).toEqual([{ interface: 'eth0', address: hosts.host('l40s').address, prefix: 24, family: 'ipv4' }]);
    expect(pickInternalIp(facts)).toBe(hosts.host('l40s').address);
    expect(pickInternalIp(facts, { network: hosts.network.subnet })).toBe(hosts.host('l40s').address);
    expect(() => pickInternalIp(facts, { network: '192.168.0.0/16' })).toThrow(`no address in network 192.168.0.0/16 (it has: ${hosts.host('l40s').address} (eth0))`);
  });

  it('detects eight H100s, four MI300X (amd-smi) and a CPU-only host', async () => {
    const trust = knownHostsTrust();
    const h100 = await detectHost(await connectSsh(hosts.target('h100x8'), trust));
    expect(h100.gpus).toEqual([{ vendor: 'nvidia', name: 'H100', raw_name: 'NVIDIA H100 80GB HBM3', memory_mib: 81559, memory_gb: 79.6, count: 8 }]);
    expect(gpuCount(h100)).toBe(8);
    const mi300 = await detectHost(await connectSsh(hosts.target('mi300'), trust));
    expect(mi300.gpus).toEqual([{ vendor: 'amd', name: 'MI300X', raw_name: 'AMD Instinct MI300X', memory_mib: 196592, memory_gb: 192, count: 4 }]);
    const cpu = await detectHost(await connectSsh(hosts.target('cpu'), trust));
    expect(cpu.gpus).toEqual([]);
    expect(cpu.container_runtime).toBeNull();
  });

  it('reuses one connection per host for concurrent callers (multiplexed channels)', async () => {
    const trust = knownHostsTrust();
    const sessions = await Promise.all(Array.from({ length: 5 }, () => connectSsh(hosts.target('cpu'), trust)));
    expect(new Set(sessions).size).toBe(1);
    const session = sessions[0]!;
    // More commands at once than OpenSSH's MaxSessions (10): the extra ones queue, none fails.
    const results = await Promise.all(Array.from({ length: 15 }, (_, i) => session.exec(`echo ${i}`)));
    expect(results.map((r) => r.stdout.trim())).toEqual(Array.from({ length: 15 }, (_, i) => String(i)));
    const ssh = await hosts.jobProcesses('cpu');
    expect(ssh).toEqual([]);
  });

  it('accepts hashed known_hosts entries and the [host]:port form', async () => {
    const file = `${hosts.knownHostsFile}.hashed`;
    await writeFile(file, `${hosts.knownHostsLine('mi300')}\n${hosts.knownHostsLine('cpu')}\n`);
    expect(hosts.knownHostsLine('mi300').startsWith(`[${hosts.host('mi300').address}]:2222 ssh-ed25519 `)).toBe(true);
    await run('ssh-keygen', ['-H', '-f', file]);
    const hashed = await run('cat', [file]);
    expect(hashed).not.toContain(hosts.host('mi300').address);
    expect(hashed.split('\n').filter(Boolean).every((l) => l.startsWith('|1|'))).toBe(true);
    const trust = new HostKeyTrust({ knownHostsFiles: [file] });
    expect((await connectSsh(hosts.target('mi300'), trust)).hostKey.trustedBy).toBe('known_hosts');
    expect((await connectSsh(hosts.target('cpu'), trust)).hostKey.trustedBy).toBe('known_hosts');
    // The entry for port 2222 does not vouch for the same address on port 22.
    await closeAllSshSessions();
    const portOnly = new HostKeyTrust({ knownHostsFiles: [file] });
    await expect(connectSsh(hosts.target('l40s'), portOnly)).rejects.toBeInstanceOf(SshHostKeyUnknownError);
  });

  it('accepts a host by the fingerprint in its config, and refuses a wrong fingerprint as changed', async () => {
    const trust = new HostKeyTrust();
    const ok = await connectSsh(hosts.target('cpu', { host_key_fingerprints: [hosts.host('cpu').hostKeyFingerprint] }), trust);
    expect(ok.hostKey.trustedBy).toBe('fingerprint');
    await closeAllSshSessions();
    const wrong = hosts.host('l40s').hostKeyFingerprint;
    const err = await connectSsh(hosts.target('cpu', { host_key_fingerprints: [wrong] }), trust).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SshHostKeyChangedError);
    const changed = err as SshHostKeyChangedError;
    expect(changed.message).toContain(`root@${hosts.host('cpu').address}:22`);
    expect(changed.message).toContain(wrong);
    expect(changed.message).toContain(hosts.host('cpu').hostKeyFingerprint);
    expect(changed.expectedFrom).toEqual(['host_key_fingerprints']);
  });

  it('refuses an unknown host unless pinning is allowed; a pinned key is returned and held to', async () => {
    await expect(connectSsh(hosts.target('rekeyed'), new HostKeyTrust())).rejects.toThrow(SshHostKeyUnknownError);
    const trust = new HostKeyTrust({ allowPinning: true });
    const session = await connectSsh(hosts.target('rekeyed'), trust);
    expect(session.hostKey.trustedBy).toBe('pinned');
    expect(session.hostKey.fingerprint).toBe(hosts.host('rekeyed').hostKeyFingerprint);
    expect(session.hostKey.knownHostsLine).toBe(hosts.knownHostsLine('rekeyed'));
    expect(trust.pinnedKeys().map((k) => k.fingerprint)).toEqual([hosts.host('rekeyed').hostKeyFingerprint]);

    // The host is reinstalled: the same trust now refuses it, even though it allows pinning.
    const pinned = hosts.host('rekeyed').hostKeyFingerprint;
    await hosts.changeHostKey('rekeyed');
    await closeAllSshSessions();
    const err = (await connectSsh(hosts.target('rekeyed'), trust).catch((e: unknown) => e)) as SshHostKeyChangedError;
    expect(err).toBeInstanceOf(SshHostKeyChangedError);
    expect(err.expectedFingerprints).toEqual([pinned]);
    expect(err.presentedFingerprint).toBe(hosts.host('rekeyed').hostKeyFingerprint);
  });

  it('refuses a changed host key against known_hosts, whatever pinning allows', async () => {
    const before = hosts.host('l40s').hostKeyFingerprint;
    await hosts.changeHostKey('l40s');
    const trust = new HostKeyTrust({ knownHostsFiles: [hosts.knownHostsFile], allowPinning: true });
    const err = (await connectSsh(hosts.target('l40s'), trust).catch((e: unknown) => e)) as SshHostKeyChangedError;
    expect(err).toBeInstanceOf(SshHostKeyChangedError);
    const at = hosts.host('l40s').address.replaceAll('.', '\\.');
    expect(err.message).toMatch(new RegExp(`HOST KEY CHANGED for root@${at}:22: expected SHA256:\\S+ \\(from .*known_hosts:\\d+\\), but the host presented ssh-ed25519 SHA256:`));
    expect(err.expectedFingerprints).toEqual([before]);
    expect(err.presentedFingerprint).toBe(hosts.host('l40s').hostKeyFingerprint);
    expect(trust.pinnedKeys()).toEqual([]);
  });

  it('refuses a client key the host does not accept, and key files others can read', async () => {
    const stranger = await hosts.generateClientKey('stranger');
    const err = await connectSsh(hosts.target('cpu', { identity_file: stranger }), knownHostsTrust()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SshAuthenticationError);
    expect((err as Error).message).toContain(`the server refused the key ${stranger} for user root`);

    const loose = `${hosts.clientKeyPath}.loose`;
    await copyFile(hosts.clientKeyPath, loose);
    await chmod(loose, 0o644);
    const looseErr = await connectSsh(hosts.target('cpu', { identity_file: loose }), knownHostsTrust()).catch((e: unknown) => e);
    expect(looseErr).toBeInstanceOf(SshKeyFileError);
    expect((looseErr as Error).message).toContain(`is readable by group or others (mode 0644): refusing to use it. Run: chmod 600 ${loose}`);
  });

  it('reports a refused port and an unreachable address as typed errors, fast', async () => {
    const started = Date.now();
    const refused = await connectSsh(hosts.target('cpu', { port: 2200 }), knownHostsTrust(), { timeouts: fast }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(SshConnectionRefusedError);
    expect((refused as Error).message).toContain(`root@${hosts.host('cpu').address}:2200`);
    // The hidden host's address is routed nowhere from here.
    const unreachable = await connectSsh(hosts.target('hidden', { proxy_jump: undefined }), knownHostsTrust(), { timeouts: fast }).catch(
      (e: unknown) => e,
    );
    expect(unreachable).toBeInstanceOf(SshHostUnreachableError);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('reaches a host behind a jump only through it, and detects it', async () => {
    const trust = knownHostsTrust();
    const session = await connectSsh(hosts.target('hidden'), trust);
    expect(session.jump?.host).toBe(`root@${hosts.host('cpu').address}:22`);
    expect(session.host).toBe(`root@${hosts.host('hidden').address}:22 (via root@${hosts.host('cpu').address}:22)`);
    const facts = await detectHost(session);
    expect(pickInternalIp(facts)).toBe(hosts.host('hidden').address);
    expect(facts.gpus[0]?.count).toBe(2);
    // A wrong port behind the jump: the jump host says refused.
    await expect(connectSsh(hosts.target('hidden', { port: 2200 }), trust, { timeouts: fast })).rejects.toBeInstanceOf(SshConnectionRefusedError);
  });

  it('fails commands on a host lost mid-session with a typed error within the keepalive limit', async () => {
    const session = await connectSsh(hosts.target('lost'), knownHostsTrust(), { timeouts: fast });
    expect((await session.exec('echo up')).stdout).toBe('up\n');
    const pending = session.exec('sleep 30').catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    await hosts.stopHost('lost');
    const err = await pending;
    const waited = Date.now() - started;
    expect(err).toBeInstanceOf(SshConnectionLostError);
    expect((err as Error).message).toContain(`root@${hosts.host('lost').address}:22: connection lost (no answer to 3 keepalives sent every 500 ms`);
    // keepalive 500 ms × 3, plus one interval of slack.
    expect(waited).toBeLessThan(fast.keepaliveIntervalMs * (fast.keepaliveCountMax + 2));
    await expect(session.exec('true')).rejects.toBeInstanceOf(SshConnectionLostError);
    // A new connection to the lost host fails within the connect deadline.
    const t0 = Date.now();
    const again = await connectSsh(hosts.target('lost'), knownHostsTrust(), { timeouts: fast }).catch((e: unknown) => e);
    expect(again).toSatisfy((e: unknown) => e instanceof SshTimeoutError || e instanceof SshHostUnreachableError);
    expect(Date.now() - t0).toBeLessThan(fast.connectMs + 1_000);
  });

  it('fails on a host that hangs (sshd stopped) mid-session and at handshake, without hanging', async () => {
    const session = await connectSsh(hosts.target('frozen'), knownHostsTrust(), { timeouts: fast });
    await hosts.freezeHost('frozen');
    try {
      const started = Date.now();
      const err = await session.exec('echo hello').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SshConnectionLostError);
      expect(Date.now() - started).toBeLessThan(fast.keepaliveIntervalMs * (fast.keepaliveCountMax + 2));
      // The kernel still accepts the TCP connection; no SSH banner ever comes.
      const t0 = Date.now();
      const handshake = (await connectSsh(hosts.target('frozen'), knownHostsTrust(), { timeouts: fast }).catch((e: unknown) => e)) as SshTimeoutError;
      expect(handshake).toBeInstanceOf(SshTimeoutError);
      expect(handshake.phase).toBe('handshake');
      expect(Date.now() - t0).toBeLessThan(fast.handshakeMs + 1_000);
    } finally {
      await hosts.thawHost('frozen');
    }
  });

  it('times out a command past its deadline and keeps the connection usable', async () => {
    const session = await connectSsh(hosts.target('cpu'), knownHostsTrust());
    const err = (await session.exec('sleep 20', { timeoutMs: 500 }).catch((e: unknown) => e)) as SshTimeoutError;
    expect(err).toBeInstanceOf(SshTimeoutError);
    expect(err.phase).toBe('command');
    expect((await session.exec('echo still here')).stdout).toBe('still here\n');
    // Closing the channel lets sshd end the command's session (no job process is left behind).
    await expect.poll(() => hosts.jobProcesses('cpu'), { timeout: 5_000 }).toEqual([]);
  });
});
