import { describe, expect, it } from 'vitest';
import type { HostFacts } from '../../src/backends/ssh/detect';
import { fleetSpecOf, ignoredFleetSettings } from '../../src/fleet/fleet-spec';
import { hostShortfalls, pickHosts } from '../../src/fleet/host-match';
import { previewPlacement } from '../../src/fleet/placement-preview';
import { loadFleetConfig, loadPlan } from '../../src/plan';
import type { FleetHostState, FleetState } from '../../src/contract/fleet-messages';

/** Which host a job gets (the rule FleetWorkflow allocates by, and `troupe apply` previews with). */

function facts(over: Partial<Omit<HostFacts, 'gpus'>> & { gpus?: number; gpuName?: string }): HostFacts {
  const { gpus = 0, gpuName = 'H100', ...rest } = over;
  return {
    machine: 'x86_64',
    arch: 'x86',
    cpus: 32,
    memory_gb: 256,
    disk_gb: 500,
    home: '/root',
    gpus: gpus > 0 ? [{ vendor: 'nvidia', name: gpuName, raw_name: `NVIDIA ${gpuName}`, memory_mib: 81559, memory_gb: 80, count: gpus }] : [],
    addresses: [],
    container_runtime: null,
    ...rest,
  };
}

function host(index: number, f: HostFacts, extra: Partial<FleetHostState> = {}): FleetHostState {
  return {
    index,
    spec: { target: { hostname: `10.0.0.${index + 1}`, port: 22, user: 'root', identity_file: '/k' }, internal_ip: null, network: null },
    status: 'ready',
    reason: null,
    facts: f,
    internal_ip: `10.0.0.${index + 1}`,
    host_key: null,
    jump_host_key: null,
    holder: null,
    probed_at: null,
    ...extra,
  };
}

function fleet(hosts: FleetHostState[]): FleetState {
  return { name: 'f', placement: 'cluster', hosts, closed_submissions: [], deleted: false };
}

function plan(...lines: string[]) {
  return loadPlan(['type: task', 'name: tt', ...lines, ''].join('\n'), 't.yml', { environ: {} });
}

describe('previewPlacement', () => {
  const hosts = [host(0, facts({ gpus: 8 })), host(1, facts({ gpus: 4 })), host(2, facts({})), host(3, facts({ gpus: 8 }))];
  const fourGroups = plan(
    'groups:',
    '  - {name: launcher, commands: [x]}',
    '  - {name: trainer, nodes: 2, commands: [x], resources: {gpu: "H100:8"}}',
    '  - {name: evaluator, commands: [x], resources: {gpu: "H100:4"}}',
  );

  it('gives each job the smallest free host that fits: the CPU host to the launcher, 8/8/4 GPU hosts to the others', () => {
    const placed = previewPlacement(fourGroups, fleet(hosts));
    expect(placed.map((p) => [p.group_name, p.host?.index ?? null])).toEqual([
      ['launcher', 2],
      ['trainer', 0],
      ['trainer', 3],
      ['evaluator', 1],
    ]);
  });

  it('leaves out hosts that are held, unreachable or still probing, and says why a job gets none', () => {
    const busy = [
      { ...hosts[0]!, holder: { run_id: 'r', run_name: 'other', submission: 0, job_num: 0, job_name: 'j' } },
      { ...hosts[1]!, status: 'unreachable' as const, reason: 'HOST KEY CHANGED' },
      hosts[2]!,
      { ...hosts[3]!, status: 'probing' as const },
    ];
    const placed = previewPlacement(fourGroups, fleet(busy));
    expect(placed[0]?.host?.index).toBe(2);
    expect(placed[1]?.host).toBeNull();
    expect(placed[1]?.reason).toBe(
      'no free host with cpu x86:2.., memory 8GB.., disk 100GB.., gpu H100:8 (10.0.0.1 held by other; 10.0.0.2 unreachable; 10.0.0.3 taken by an earlier job of this run; 10.0.0.4 probing)',
    );
  });

  it('compares `disk` with the free space a host reports, as dstack does: the default 100GB.. needs 100 GB free', () => {
    const small = host(0, facts({ disk_gb: 79.4 }));
    const [placed] = previewPlacement(plan('commands: [x]'), fleet([small]));
    expect(placed?.host).toBeNull();
    expect(placed?.reason).toContain('10.0.0.1: 79.4GB disk free, needs 100GB..');
    const [fits] = previewPlacement(plan('commands: [x]', 'resources: {disk: 10GB..}'), fleet([small]));
    expect(fits?.host?.index).toBe(0);
  });
});

describe('pickHosts', () => {
  it('is all or nothing', () => {
    const resources = plan('commands: [x]', 'resources: {gpu: 1}').groups[0]!.resources;
    const hosts = [host(0, facts({ gpus: 1 })), host(1, facts({}))];
    expect(pickHosts(hosts, resources, 2, new Set())).toBeNull();
    expect(pickHosts(hosts, resources, 1, new Set())?.map((h) => h.index)).toEqual([0]);
    expect(pickHosts(hosts, resources, 1, new Set([0]))).toBeNull();
  });

  it('names every shortfall of a host', () => {
    const resources = plan('commands: [x]', 'resources: {cpu: 64.., memory: 512GB.., gpu: "A100:2"}').groups[0]!.resources;
    expect(hostShortfalls(facts({ gpus: 8 }), resources)).toEqual([
      '32 CPUs, needs 64..',
      '256GB memory, needs 512GB..',
      '8× H100, needs 2 GPU',
    ]);
  });
});

describe('fleetSpecOf', () => {
  const yaml = [
    'type: fleet',
    'name: lab',
    'blocks: 2',
    'env: [A=1]',
    'ssh_config:',
    '  user: root',
    '  identity_file: keys/fleet',
    '  proxy_jump: {hostname: bastion, user: jump, identity_file: ~/.ssh/jump}',
    '  network: 10.10.0.0/16',
    '  hosts: [10.10.0.1, {hostname: 10.10.0.2, port: 2222, identity_file: /abs/key}]',
    '',
  ].join('\n');
  const config = loadFleetConfig(yaml, '/configs/lab/fleet.yml', { environ: {} });

  it('resolves a relative key from the config file, keeps ~ for the worker, and carries the jump host and network', () => {
    expect(fleetSpecOf(config, '/configs/lab/fleet.yml')).toEqual({
      name: 'lab',
      placement: 'any',
      hosts: [
        {
          target: {
            hostname: '10.10.0.1',
            port: 22,
            user: 'root',
            identity_file: '/configs/lab/keys/fleet',
            proxy_jump: { hostname: 'bastion', port: 22, user: 'jump', identity_file: '~/.ssh/jump' },
          },
          internal_ip: null,
          network: '10.10.0.0/16',
        },
        {
          target: {
            hostname: '10.10.0.2',
            port: 2222,
            user: 'root',
            identity_file: '/abs/key',
            proxy_jump: { hostname: 'bastion', port: 22, user: 'jump', identity_file: '~/.ssh/jump' },
          },
          internal_ip: null,
          network: '10.10.0.0/16',
        },
      ],
    });
    expect(fleetSpecOf(config, '/configs/lab/fleet.yml', 'other').name).toBe('other');
  });

  it('says what of the config is not used, and needs a name', () => {
    expect(ignoredFleetSettings(config)).toEqual([
      'blocks: 2 is not supported: every job gets a whole host',
      "env of the fleet is not applied to jobs: set it in the task's env",
    ]);
    const unnamed = loadFleetConfig(yaml.replace('name: lab\n', ''), 'f.yml', { environ: {} });
    expect(() => fleetSpecOf(unnamed, 'f.yml')).toThrow('f.yml: the fleet has no name: set `name:` in the file or pass --name');
  });
});
