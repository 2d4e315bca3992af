import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors';
import { isPrivateIp, parseNetwork } from '../../src/config/ip-address';
import { loadFleetConfig } from '../../src/plan';
import { thrownBy } from '../helpers/refusal';

function yaml(...lines: string[]): string {
  return `${lines.join('\n')}\n`;
}

function load(text: string, environ: Record<string, string> = {}) {
  return loadFleetConfig(text, 'fleet.yml', { environ });
}

function refusal(text: string): string {
  const { message } = thrownBy(() => load(text), ConfigError);
  expect(message).not.toContain('\n');
  return message;
}

describe('the seed fleet (examples/pd-disagg-fleet.yml)', () => {
  it('lists three hosts with the shared user and key', () => {
    const file = fileURLToPath(new URL('../../examples/pd-disagg-fleet.yml', import.meta.url));
    const fleet = loadFleetConfig(readFileSync(file, 'utf8'), 'examples/pd-disagg-fleet.yml', { environ: {} });
    expect(fleet.name).toBe('pd-disagg');
    expect(fleet.placement).toBe('cluster');
    expect(fleet.hosts.map((h) => h.hostname)).toEqual(['89.169.102.124', '89.169.127.168', '89.169.122.52']);
    for (const host of fleet.hosts) {
      expect(host).toMatchObject({ port: 22, user: 'dstack', identity_file: '~/.ssh/id_rsa', proxy_jump: null, internal_ip: null, blocks: 1 });
    }
  });
});

describe('ssh_config', () => {
  it('resolves each host: its own settings over ssh_config, port 22 by default', () => {
    const fleet = load(
      yaml(
        'type: fleet',
        'env: [A=1, B]',
        'blocks: 2',
        'ssh_config:',
        '  user: root',
        '  port: 2222',
        '  identity_file: /keys/fleet',
        '  proxy_jump: {hostname: bastion, user: jump, identity_file: /keys/jump}',
        '  network: 10.10.0.0/16',
        '  hosts:',
        '    - 10.10.0.1',
        '    - hostname: 10.10.0.2',
        '      port: 22',
        '      user: admin',
        '      identity_file: /keys/two',
        '      blocks: auto',
        '      proxy_jump: {hostname: other, port: 2200, user: j2, identity_file: /keys/j2}',
      ),
      { B: 'from-shell' },
    );
    expect(fleet).toEqual({
      name: null,
      placement: 'any',
      network: '10.10.0.0/16',
      env: { A: '1', B: 'from-shell' },
      hosts: [
        {
          hostname: '10.10.0.1',
          port: 2222,
          user: 'root',
          identity_file: '/keys/fleet',
          proxy_jump: { hostname: 'bastion', port: 22, user: 'jump', identity_file: '/keys/jump' },
          internal_ip: null,
          blocks: 2,
        },
        {
          hostname: '10.10.0.2',
          port: 22,
          user: 'admin',
          identity_file: '/keys/two',
          proxy_jump: { hostname: 'other', port: 2200, user: 'j2', identity_file: '/keys/j2' },
          internal_ip: null,
          blocks: 'auto',
        },
      ],
    });
  });

  it('takes internal_ip for all hosts', () => {
    const fleet = load(
      yaml(
        'type: fleet',
        'ssh_config:',
        '  user: u',
        '  identity_file: /k',
        '  hosts:',
        '    - {hostname: a.example, internal_ip: 192.168.1.10}',
        '    - {hostname: b.example, internal_ip: 192.168.1.11}',
      ),
    );
    expect(fleet.hosts.map((h) => h.internal_ip)).toEqual(['192.168.1.10', '192.168.1.11']);
  });

  it('needs a user and a key for every host', () => {
    expect(refusal(yaml('type: fleet', 'ssh_config:', '  identity_file: /k', '  hosts: [a]'))).toBe(
      'fleet.yml:4:11: ssh_config.hosts[0]: no SSH user for host a: set `user` in ssh_config or on the host',
    );
    expect(refusal(yaml('type: fleet', 'ssh_config:', '  user: u', '  hosts:', '    - a', '    - {hostname: b, identity_file: /k}'))).toBe(
      'fleet.yml:5:7: ssh_config.hosts[0]: no SSH key for host a: set `identity_file` in ssh_config or on the host',
    );
  });

  it('refuses internal_ip for some hosts only, beside network, or public', () => {
    const base = ['type: fleet', 'ssh_config:', '  user: u', '  identity_file: /k'];
    expect(refusal(yaml(...base, '  hosts:', '    - {hostname: a, internal_ip: 10.0.0.1}', '    - b'))).toBe(
      'fleet.yml:7:7: ssh_config.hosts[1]: `internal_ip` must be given for all hosts or for none',
    );
    expect(refusal(yaml(...base, '  network: 10.0.0.0/24', '  hosts:', '    - {hostname: a, internal_ip: 10.0.0.1}'))).toBe(
      'fleet.yml:5:12: ssh_config.network: `internal_ip` and `network` are mutually exclusive: keep one',
    );
    expect(refusal(yaml(...base, '  hosts:', '    - {hostname: a, internal_ip: 8.8.8.8}'))).toBe(
      'fleet.yml:6:34: ssh_config.hosts[0].internal_ip: "8.8.8.8" is not a private address: internal_ip must be private',
    );
    expect(refusal(yaml(...base, '  hosts:', '    - {hostname: a, internal_ip: not-an-ip}'))).toBe(
      'fleet.yml:6:34: ssh_config.hosts[0].internal_ip: "not-an-ip" is not an IP address',
    );
    expect(refusal(yaml(...base, '  network: 8.8.0.0/16', '  hosts: [a]'))).toBe(
      'fleet.yml:5:12: ssh_config.network: "8.8.0.0/16" is a public network: the cluster network must be private',
    );
    expect(refusal(yaml(...base, '  network: 10.0.0.0/33', '  hosts: [a]'))).toMatch(/^fleet\.yml:5:12: ssh_config\.network: "10\.0\.0\.0\/33" is not a network/);
  });

  it('refuses a host listed twice, an empty host list, and bad ports and blocks', () => {
    const base = ['type: fleet', 'ssh_config:', '  user: u', '  identity_file: /k'];
    expect(refusal(yaml(...base, '  hosts: [a, b, a]'))).toBe('fleet.yml:5:17: ssh_config.hosts[2]: host a:22 is listed twice (also hosts[0])');
    expect(load(yaml(...base, '  hosts: [a, {hostname: a, port: 2201}]')).hosts).toHaveLength(2);
    expect(refusal(yaml(...base, '  hosts: []'))).toBe('fleet.yml:5:10: ssh_config.hosts: `hosts` is empty: list at least one host');
    expect(refusal(yaml(...base, '  port: 0', '  hosts: [a]'))).toBe('fleet.yml:5:9: ssh_config.port: expected an SSH port 1..65535, got a number (0)');
    expect(refusal(yaml(...base, '  hosts: [{hostname: a, blocks: 0}]'))).toBe(
      'fleet.yml:5:33: ssh_config.hosts[0].blocks: expected a number of blocks >= 1, or auto, got a number (0)',
    );
    expect(refusal(yaml(...base, '  hosts: [{port: 22}]'))).toBe('fleet.yml:5:11: ssh_config.hosts[0].hostname: required field is missing');
  });
});

describe('fleet fields', () => {
  it('needs ssh_config', () => {
    expect(refusal(yaml('type: fleet', 'name: f1'))).toBe('fleet.yml:1:1: ssh_config: a Troupe fleet needs `ssh_config` with the `hosts` to use');
  });

  it('refuses cloud-fleet fields dstack has and Troupe does not', () => {
    expect(refusal(yaml('type: fleet', 'nodes: 2'))).toBe(
      'fleet.yml:2:1: nodes: Troupe does not support the dstack field `nodes` (Troupe fleets are existing hosts listed in `ssh_config`): remove it',
    );
    expect(refusal(yaml('type: fleet', 'ssh_config: {user: u, identity_file: /k, hosts: [a]}', 'backends: [aws]'))).toMatch(
      /^fleet\.yml:3:1: backends: Troupe does not support the dstack field `backends`/,
    );
    expect(refusal(yaml('type: fleet', 'ssh_config: {user: u, identity_file: /k, hosts: [a], ssh_key: {public: x}}'))).toMatch(
      /^fleet\.yml:2:54: ssh_config\.ssh_key: Troupe does not support the dstack field `ssh_key` \(give `identity_file`/,
    );
    expect(refusal(yaml('type: fleet', 'ssh_config: {user: u, identity_file: /k, hosts: [a], hostz: []}'))).toMatch(
      /^fleet\.yml:2:54: ssh_config\.hostz: unknown field `hostz` in `ssh_config` \(did you mean `hosts`\?\)/,
    );
  });

  it('checks name, placement, type and env', () => {
    const ssh = 'ssh_config: {user: u, identity_file: /k, hosts: [a]}';
    expect(refusal(yaml('type: fleet', 'name: Lab_1', ssh))).toBe(
      'fleet.yml:2:7: name: fleet name "Lab_1" must match ^[a-z][a-z0-9-]{1,40}$ (lowercase letters, digits and -, starting with a letter)',
    );
    expect(refusal(yaml('type: fleet', 'placement: rack', ssh))).toBe('fleet.yml:2:12: placement: expected one of any, cluster, got a string ("rack")');
    expect(refusal(yaml('type: task', 'commands: [a]'))).toMatch(/^fleet\.yml:1:7: type: this is a task config; a fleet file takes a fleet config/);
    expect(refusal(yaml('type: fleet', 'env: [MISSING]', ssh))).toBe(
      'fleet.yml:2:7: env[0]: environment variable MISSING is not set in this shell: export it, or write MISSING=<value>',
    );
  });
});

describe('IP addresses', () => {
  it.each([
    ['10.1.2.3', true],
    ['172.16.0.1', true],
    ['172.32.0.1', false],
    ['192.168.0.1', true],
    ['127.0.0.1', true],
    ['169.254.1.1', true],
    ['8.8.8.8', false],
    ['100.64.0.1', false],
    ['fd00::1', true],
    ['fe80::1', true],
    ['::1', true],
    ['2001:4860::8888', false],
    ['::ffff:10.0.0.1', true],
    ['256.1.1.1', false],
    ['host.example', false],
  ])('%s private: %s', (ip, expected) => {
    expect(isPrivateIp(ip)).toBe(expected);
  });

  it.each([
    ['10.0.0.0/8', { private: true }],
    ['10.0.0.5/24', { private: true }],
    ['192.168.0.0/255.255.0.0', { private: true }],
    ['0.0.0.0/0', { private: false }],
    ['172.0.0.0/8', { private: false }],
    ['10.0.0.0/33', undefined],
    ['10.0.0.0/255.0.255.0', undefined],
    ['nope/8', undefined],
  ])('network %s → %j', (text, expected) => {
    expect(parseNetwork(text)).toEqual(expected);
  });
});

describe('host names and users reach ssh: their grammar is checked', () => {
  const fleet = (host: string, user = 'ubuntu') =>
    yaml('type: fleet', 'name: f1', 'ssh_config:', `  user: ${JSON.stringify(user)}`, '  identity_file: /k', '  hosts:', `    - ${JSON.stringify(host)}`);

  it.each(['-oProxyCommand=id', 'a b', 'host\nname', ''])('host %j is refused', (host) => {
    expect(refusal(fleet(host))).toMatch(/ssh_config\.hosts\[0\]\.hostname: ".*" is not a host name or address: a DNS name or an IP address, not starting with - and without spaces$/);
  });

  it.each(['-oProxyCommand=id', 'root user', 'x'.repeat(40)])('user %j is refused', (user) => {
    expect(refusal(fleet('10.0.0.1', user))).toMatch(/ssh_config\.user: ".*" is not a user name/);
  });

  it.each(['10.0.0.1', 'gpu-1.internal', 'fe80::1%eth0', '::1', 'localhost'])('host %j is taken', (host) => {
    expect(load(fleet(host)).hosts[0]?.hostname).toBe(host);
  });
});
