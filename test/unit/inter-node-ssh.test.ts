import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { renderNodeSsh, SshLayout, type NodeSshInput } from '../../src/runner/inter-node-ssh';
import { deriveRunSshKeys } from '../../src/secrets/run-ssh-keys';
import { ed25519FromSeed } from '../../src/secrets/ssh-key-pair';

/** The run's inter-node SSH keys and the files each node gets (the servers themselves: test/e2e/local-mpi.test.ts). */

const dir = mkdtempSync(join(tmpdir(), 'troupe-ssh-keys-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const secret = Buffer.alloc(32, 7);

describe('run SSH keys', () => {
  it('an ed25519 pair from a seed is one OpenSSH reads: ssh-keygen derives the same public key from the private file', () => {
    const pair = ed25519FromSeed(Buffer.alloc(32, 1));
    const file = join(dir, 'id');
    writeFileSync(file, pair.privateKey, { mode: 0o600 });
    expect(execFileSync('ssh-keygen', ['-y', '-f', file], { encoding: 'utf8' }).trim()).toBe(pair.publicKey);
    expect(ed25519FromSeed(Buffer.alloc(32, 1))).toEqual(pair);
  });

  it('the same secret, run and submission give the same keys (a replacement worker); any other gives others', () => {
    const keys = deriveRunSshKeys(secret, 'run-a', 0);
    const again = deriveRunSshKeys(secret, 'run-a', 0);
    expect(again.client).toEqual(keys.client);
    expect(again.host(3)).toEqual(keys.host(3));
    const others = [
      deriveRunSshKeys(secret, 'run-b', 0).client,
      deriveRunSshKeys(secret, 'run-a', 1).client,
      deriveRunSshKeys(Buffer.alloc(32, 8), 'run-a', 0).client,
      keys.host(0),
      keys.host(1),
    ];
    const publics = new Set([keys.client.publicKey, ...others.map((k) => k.publicKey)]);
    expect(publics.size).toBe(6);
  });
});

function input(overrides: Partial<NodeSshInput> = {}): NodeSshInput {
  const keys = deriveRunSshKeys(secret, 'run-a', 0);
  return {
    jobDir: '/state/runs/r/0/job-1',
    keys: {
      client: keys.client,
      host: keys.host(1),
      peers: ['10.0.0.1', '10.0.0.2', '10.0.0.3'].map((ip, n) => ({ ip, hostPublicKey: keys.host(n).publicKey })),
    },
    listen: { ip: '10.0.0.2', port: 22 },
    peerPorts: [22, 22, 22],
    user: 'troupe-0123456789',
    home: '/state/runs/r/0/job-1/work',
    tmpdir: null,
    sessionEnv: { TROUPE_INSTANCE_ID: 'i-1' },
    sshd: '/usr/sbin/sshd',
    ssh: '/usr/bin/ssh',
    ...overrides,
  };
}

describe('a node\'s SSH files', () => {
  it('the server takes only the run\'s key, only for the job\'s user, on the node\'s address, and runs sessions in the job\'s env', () => {
    const { files } = renderNodeSsh(input());
    const server = files[SshLayout.serverConfig] ?? '';
    expect(server).toContain('ListenAddress 10.0.0.2\n');
    expect(server).toContain('AllowUsers troupe-0123456789\n');
    expect(server).toContain('PasswordAuthentication no\n');
    expect(server).toContain('AuthorizedKeysFile "/state/runs/r/0/job-1/ssh/authorized_keys"\n');
    expect(server).toContain('ForceCommand /bin/bash --noprofile --norc "/state/runs/r/0/job-1/ssh/session.sh"\n');
    const keys = input().keys;
    expect(files[SshLayout.authorizedKeys]).toBe(`${keys.client.publicKey}\n`);
    expect(files[SshLayout.hostKey]).toBe(keys.host.privateKey);
    expect(files[SshLayout.clientKey]).toBe(keys.client.privateKey);
    const session = files[SshLayout.session] ?? '';
    expect(session).toContain(`. "$dir/job.env" || exit 126`);
    expect(session).toContain(`export HOME='/state/runs/r/0/job-1/work'`);
    expect(session).toContain(`export TROUPE_INSTANCE_ID='i-1'`);
  });

  it('known_hosts has every peer\'s host key by address, and strict checking is on', () => {
    const { files } = renderNodeSsh(input());
    const keys = input().keys;
    expect(files[SshLayout.knownHosts]).toBe(keys.peers.map((p) => `${p.ip} ${p.hostPublicKey}\n`).join(''));
    expect(files[SshLayout.clientConfig]).toContain('StrictHostKeyChecking yes');
    expect(files[SshLayout.clientConfig]).not.toContain('Port');
  });

  it('peers on other ports (SSH fleets) get a Port line and `[ip]:port` in known_hosts', () => {
    const { files } = renderNodeSsh(input({ listen: { ip: '10.0.0.2', port: 40022 }, peerPorts: [40021, 40022, 22] }));
    expect(files[SshLayout.serverConfig]).toContain('ListenAddress [10.0.0.2]:40022\n');
    expect(files[SshLayout.clientConfig]).toMatch(/^Host 10\.0\.0\.1\n {2}Port 40021\nHost 10\.0\.0\.2\n {2}Port 40022\nHost \*\n/m);
    expect(files[SshLayout.knownHosts]?.split('\n').map((l) => l.split(' ')[0])).toEqual(['[10.0.0.1]:40021', '[10.0.0.2]:40022', '10.0.0.3', '']);
  });

  it('refuses a job directory that cannot be written into an SSH config', () => {
    expect(() => renderNodeSsh(input({ jobDir: '/state/a"b' }))).toThrow(/cannot go into an SSH config/);
  });

  it('a node without sshd runs the job anyway, without inter-node SSH, and says so in its log', () => {
    const jobDir = mkdtempSync(join(dir, 'job-'));
    const { files, scripts } = renderNodeSsh(input({ jobDir, sshd: join(jobDir, 'no-such-sshd') }));
    for (const [name, content] of Object.entries(files)) {
      mkdirSync(dirname(join(jobDir, SshLayout.dir, name)), { recursive: true });
      writeFileSync(join(jobDir, SshLayout.dir, name), content, { mode: scripts.includes(name) ? 0o700 : 0o600 });
    }
    writeFileSync(join(jobDir, 'launch.sh'), 'echo "commands ran"; exit 3\n');
    const out = spawnSync('bash', [join(jobDir, SshLayout.dir, SshLayout.run)], { encoding: 'utf8' });
    expect(out.status).toBe(3);
    expect(out.stdout).toBe('commands ran\n');
    expect(out.stderr).toContain('troupe: this node has no inter-node SSH:');
    expect(existsSync(join(jobDir, SshLayout.dir, SshLayout.state, SshLayout.off))).toBe(true);
  });
});
