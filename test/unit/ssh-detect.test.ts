import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { pickInternalIp, type HostFacts } from '../../src/backends/ssh';
import { detectScript, parseHostFacts } from '../../src/backends/ssh/detect';
import { normalizeGpuName, parseAmdSmi, parseNvidiaSmi, parseRocmSmi } from '../../src/backends/ssh/gpu-tools';

describe('GPU names', () => {
  it.each([
    ['NVIDIA L40S', 'L40S'],
    ['NVIDIA H100 80GB HBM3', 'H100'],
    ['NVIDIA H100 NVL', 'H100NVL'],
    ['NVIDIA A100-SXM4-80GB', 'A100'],
    ['Tesla V100-SXM2-16GB', 'V100'],
    ['NVIDIA GeForce RTX 4090', 'RTX4090'],
    ['NVIDIA RTX A6000', 'RTXA6000'],
    ['Quadro RTX 6000', 'RTX6000'],
    ['NVIDIA GH200 480GB', 'GH200'],
    ['NVIDIA A10G', 'A10G'],
    ['AMD Instinct MI300X', 'MI300X'],
    ['AMD Instinct MI300X VF', 'MI300X'],
    ['AMD INSTINCT MI250 (MCM) OAM AC MBA', 'MI250'],
  ])('%s → %s', (raw, name) => {
    expect(normalizeGpuName(raw)).toBe(name);
  });
});

describe('GPU tool output', () => {
  it('nvidia-smi csv: one entry per model with its count; "No devices" means none', () => {
    const out = 'NVIDIA H100 80GB HBM3, 81559\n'.repeat(8) + 'NVIDIA L40S, 46068\n';
    expect(parseNvidiaSmi(out)).toEqual([
      { vendor: 'nvidia', name: 'H100', raw_name: 'NVIDIA H100 80GB HBM3', memory_mib: 81559, memory_gb: 79.6, count: 8 },
      { vendor: 'nvidia', name: 'L40S', raw_name: 'NVIDIA L40S', memory_mib: 46068, memory_gb: 45, count: 1 },
    ]);
    expect(parseNvidiaSmi('No devices were found\n')).toEqual([]);
    expect(parseNvidiaSmi('NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver.\n')).toEqual([]);
  });

  it('amd-smi json: the list of ROCm 6, the gpu_data object of later releases, sizes as objects or strings', () => {
    const device = (size: unknown) => ({ gpu: 0, asic: { market_name: 'AMD Instinct MI300X' }, vram: { type: 'HBM3', size } });
    const expected = [{ vendor: 'amd', name: 'MI300X', raw_name: 'AMD Instinct MI300X', memory_mib: 196592, memory_gb: 192, count: 2 }];
    expect(parseAmdSmi(JSON.stringify([device({ value: 196592, unit: 'MB' }), device({ value: 196592, unit: 'MB' })]))).toEqual(expected);
    expect(parseAmdSmi(JSON.stringify({ gpu_data: [device('196592 MB'), device(196592)] }))).toEqual(expected);
    expect(parseAmdSmi('not json')).toEqual([]);
  });

  it('rocm-smi json: cards with string values in bytes', () => {
    const card = { 'Card Series': 'AMD Instinct MI250X', 'VRAM Total Memory (B)': '68702699520' };
    expect(parseRocmSmi(JSON.stringify({ card0: card, card1: card, system: { 'Driver version': '6.1' } }))).toEqual([
      { vendor: 'amd', name: 'MI250X', raw_name: 'AMD Instinct MI250X', memory_mib: 65520, memory_gb: 64, count: 2 },
    ]);
  });
});

const sample = [
  '@@troupe:machine', 'aarch64',
  '@@troupe:cpus', '64',
  '@@troupe:meminfo', 'MemTotal:       527939072 kB',
  '@@troupe:home', '/home/ubuntu',
  '@@troupe:df', '/dev/nvme0n1p1  1015000000  15000000  1000000000  2% /',
  '@@troupe:ip',
  '1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever',
  '2: docker0    inet 172.17.0.1/16 brd 172.17.255.255 scope global docker0\\       valid_lft forever',
  '3: ens5    inet 89.169.102.124/24 brd 89.169.102.255 scope global ens5\\       valid_lft forever',
  '4: ens6    inet 10.0.1.17/16 brd 10.0.255.255 scope global ens6\\       valid_lft forever',
  '4: ens6    inet6 fe80::1/64 scope link \\       valid_lft forever',
  '@@troupe:hostname-i', '172.17.0.1 89.169.102.124 10.0.1.17',
  '@@troupe:nvidia-smi', 'NVIDIA GH200 480GB, 97871',
  '@@troupe:amd-smi',
  '@@troupe:rocm-smi',
  '@@troupe:runtime', 'docker',
  '@@troupe:end', '',
].join('\n');

describe('host facts', () => {
  it('parses the detect script output', () => {
    const facts = parseHostFacts(sample);
    expect(facts).toMatchObject({ machine: 'aarch64', arch: 'arm', cpus: 64, memory_gb: 503.5, disk_gb: 953.7, home: '/home/ubuntu', container_runtime: 'docker' });
    expect(facts.gpus).toEqual([{ vendor: 'nvidia', name: 'GH200', raw_name: 'NVIDIA GH200 480GB', memory_mib: 97871, memory_gb: 95.6, count: 1 }]);
    expect(facts.addresses.map((a) => `${a.interface} ${a.address}/${a.prefix}`)).toEqual(['docker0 172.17.0.1/16', 'ens5 89.169.102.124/24', 'ens6 10.0.1.17/16']);
  });

  it('refuses an incomplete output', () => {
    expect(() => parseHostFacts(sample.replace('@@troupe:end', ''))).toThrow(/incomplete/);
  });

  it('runs for real in this machine\'s bash and parses', () => {
    const facts = parseHostFacts(execFileSync('bash', ['--noprofile', '--norc', '-c', detectScript('/tmp/no/such/dir')], { encoding: 'utf8' }));
    expect(facts.cpus).toBeGreaterThan(0);
    expect(facts.memory_gb).toBeGreaterThan(0);
    expect(facts.disk_gb).toBeGreaterThan(0);
    expect(facts.machine).toMatch(/\S/);
  });
});

describe('pickInternalIp', () => {
  const facts: Pick<HostFacts, 'addresses'> = parseHostFacts(sample);

  it('takes internal_ip when the host has it, else names what the host has', () => {
    expect(pickInternalIp(facts, { internal_ip: '89.169.102.124' })).toBe('89.169.102.124');
    expect(() => pickInternalIp(facts, { internal_ip: '10.9.9.9' })).toThrow(
      'internal_ip 10.9.9.9 is not an address of the host (it has: 172.17.0.1 (docker0), 89.169.102.124 (ens5), 10.0.1.17 (ens6))',
    );
  });

  it('takes the address inside network', () => {
    expect(pickInternalIp(facts, { network: '89.169.0.0/16' })).toBe('89.169.102.124');
    expect(() => pickInternalIp(facts, { network: '192.168.0.0/24' })).toThrow(/no address in network 192.168.0.0\/24/);
    expect(() => pickInternalIp(facts, { network: 'fd00::/8' })).toThrow(/not an IPv4 CIDR/);
  });

  it('else the first private address, skipping container bridges and addresses on lo (a service address there is not how peers reach the host)', () => {
    expect(pickInternalIp(facts)).toBe('10.0.1.17');
    const withVip = { addresses: [{ interface: 'lo', address: '10.200.0.1', prefix: 32, family: 'ipv4' as const }, ...facts.addresses] };
    expect(pickInternalIp(withVip)).toBe('10.0.1.17');
    expect(pickInternalIp(withVip, { internal_ip: '10.200.0.1' })).toBe('10.200.0.1');
    expect(() => pickInternalIp({ addresses: [{ interface: 'eth0', address: '89.1.2.3', prefix: 24, family: 'ipv4' }] })).toThrow(
      /no private IPv4 address .* set internal_ip or network/,
    );
  });
});
