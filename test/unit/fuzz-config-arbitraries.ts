import { isDeepStrictEqual } from 'node:util';
import { Worker } from 'node:worker_threads';
import fc from 'fast-check';
import { stringify } from 'yaml';
import { ConfigError } from '../../src/config/errors';
import { FleetConfigSchema, type FleetConfig } from '../../src/config/fleet-schema';
import { PlanSchema, type Plan } from '../../src/plan';

/**
 * Generators over the real task and fleet schemas, mutations of the structure and of the YAML
 * text, and the checks every outcome must pass: a plan that keeps its invariants, or a one-line
 * ConfigError pointing into the file. Shared by test/unit/fuzz-*.test.ts.
 */

// ---------------------------------------------------------------- values users write

/** One of these values (of any types). */
function pick<T extends unknown[]>(...values: T): fc.Arbitrary<T[number]> {
  return fc.constantFrom(...values);
}

export const runNameArb = fc.stringMatching(/^[a-z][a-z0-9-]{1,20}$/);
export const groupNameArb = fc.stringMatching(/^[a-z0-9][a-z0-9-]{0,10}$/);
export const envKeyArb = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,8}$/);

/** Shell metacharacters, quotes, newlines, unicode: env values and commands are free text. */
export const freeTextArb = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'grapheme', maxLength: 12 }),
  pick('$(touch /tmp/x)', '`id`', "a'b\"c", 'a;b', 'line1\nline2', '\\', '${HOME}', '*', '#', '', ' ', '~', '!', '%', '@'),
);

/** Usually `valid`, sometimes one of the mistakes users make. */
const mostly = <T, U>(valid: fc.Arbitrary<T>, mistake: fc.Arbitrary<U>, weight = 30) =>
  fc.oneof({ arbitrary: valid, weight }, { arbitrary: mistake, weight: 1 });

const count = fc.integer({ min: 1, max: 64 });
const sizeGb = fc.oneof(fc.integer({ min: 1, max: 2048 }), pick(0.5, 1.5, 80));

export const cpuArb = mostly(
  fc.oneof(
    count,
    count.map(String),
    fc.tuple(count, count).map(([a, b]) => `${Math.min(a, b)}..${Math.max(a, b)}`),
    count.map((a) => `${a}..`),
    count.map((a) => `..${a}`),
    fc.option(count, { nil: undefined }).map((n) => (n === undefined ? 'x86' : `x86:${n}`)),
    fc.record({ min: fc.option(count, { nil: undefined }), max: fc.option(count, { nil: undefined }) }, { requiredKeys: ['min'] }),
    fc.record({ arch: pick('x86', 'X86'), count: count.map((n) => `${n}..`) }, { requiredKeys: [] }),
  ),
  pick('arm:8', 'ARM', '8..2', '..', 'x86:arm', '4:8', 'riscv', -1, { arch: 'arm' }, { min: null }, { count: 4, extra: 1 }),
);

export const memoryArb = mostly(
  fc.oneof(
    sizeGb,
    sizeGb.map((n) => `${n}GB`),
    sizeGb.map((n) => `${n}GB..`),
    sizeGb.map((n) => `..${n}GB`),
    fc.tuple(sizeGb, sizeGb).map(([a, b]) => `${Math.min(a, b)}GB..${Math.max(a, b)}GB`),
    fc.integer({ min: 1, max: 4096 }).map((n) => `${n}MB`),
    pick('1TB', '1.5TB..', ' 8 gb .. '),
    fc.record({ min: sizeGb.map((n) => `${n}GB`) }),
  ),
  pick('8XB', '16GB..8GB', '..', 'GB', '-5GB', '1e400GB', { size: '8GB' }),
);

const gpuNameArb = pick('L40S', 'A100', 'H100', 'T4', 'A10G', 'GH200', 'GB200', 'RTX4090', 'v5litepod-8', 'tpu-v3-8', 'Unknown9');
/** Accelerators the default image cannot run: refused without `image`. */
const otherGpuNameArb = pick('MI300X', 'Gaudi2', 'n150');
const nvidiaNameArb = pick('L40S', 'A100', 'H100', 'T4', 'A10G', 'RTX4090', 'v5litepod-8');

export const gpuArb = mostly(
  fc.oneof(
    gpuNameArb,
    fc.tuple(gpuNameArb, count).map(([n, c]) => `${n}:${c}`),
    fc.tuple(gpuNameArb, gpuNameArb, sizeGb, count).map(([a, b, m, c]) => `${a},${b}:${m}GB:${c}`),
    fc.tuple(pick('nvidia', 'tpu', 'NVIDIA'), count).map(([v, c]) => `${v}:${c}`),
    pick('nvidia:24GB..:1..4', '24GB..:1..4', '0', 0, 1, 'A100:40GB..80GB:2..8', null),
    fc.record(
      {
        vendor: pick('nvidia', 'google'),
        name: fc.oneof(gpuNameArb, fc.array(gpuNameArb, { minLength: 1, maxLength: 3 })),
        count: fc.oneof(count, count.map((n) => `${n}..`)),
        memory: sizeGb.map((n) => `${n}GB..`),
        total_memory: sizeGb.map((n) => `${n}GB`),
        compute_capability: pick('8.0', 9, '7.5', [8, 6]),
      },
      { requiredKeys: [] },
    ),
  ),
  fc.oneof(
    otherGpuNameArb,
    fc.tuple(pick('amd', 'intel', 'tt'), count).map(([v, c]) => `${v}:${c}`),
    pick('A100:2:4', 'A100::2', ',A100', 'nvidia:amd', { vendor: 'acme' }, { count: null }, { compute_capability: 'x' }),
  ),
);

export const diskArb = mostly(
  fc.oneof(sizeGb.map((n) => `${n}GB..`), sizeGb.map((n) => ({ size: `${n}GB` })), fc.constant(null)),
  pick({}, { size: 'big' }, 'lots'),
);

export const resourcesArb = fc.record(
  { cpu: cpuArb, memory: memoryArb, gpu: gpuArb, disk: diskArb, shm_size: sizeGb.map((n) => `${n}GB`) },
  { requiredKeys: [] },
);

/** Durations as dstack reads them; `off` where it may be switched off. */
export const durationArb = mostly(
  fc.oneof(
    fc.integer({ min: 1, max: 1_000_000 }),
    fc.tuple(fc.integer({ min: 1, max: 500 }), pick('s', 'm', 'h', 'd', 'w')).map(([n, u]) => `${n}${u}`),
    pick('90', 1.5, '1h'),
  ),
  pick(0, '0s', '0.5s', '500ms', '-1', 'forever', '1y', '99999999999999999999w', 1e300),
);

/** Probe timings may be fractional. */
const probeTimeArb = mostly(fc.oneof(durationArb, pick('0.5s', '500ms', 0.25)), pick(0, '0ms', 'off'));

export const retryArb = fc.oneof(
  fc.boolean(),
  fc.record(
    {
      on_events: mostly(fc.subarray(['no-capacity', 'interruption', 'error'], { minLength: 1 }), pick([], ['spot'], 'error')),
      duration: durationArb,
    },
    { requiredKeys: [] },
  ),
);

export const portArb = mostly(
  fc.oneof(
    fc.integer({ min: 1, max: 65535 }),
    fc.tuple(fc.integer({ min: 1, max: 65535 }), fc.integer({ min: 1, max: 65535 })).map(([a, b]) => `${a}:${b}`),
    fc.integer({ min: 1, max: 65535 }).map((p) => `*:${p}`),
    fc.record({ container_port: fc.integer({ min: 1, max: 65535 }), local_port: fc.option(fc.integer({ min: 1, max: 65535 }), { nil: null }) }),
  ),
  pick(0, 65536, '80:', 'http', { local_port: 80 }, -22),
);

export const readyArb = mostly(
  fc.oneof(
    fc.record({
      http: fc.oneof(fc.integer({ min: 1, max: 65535 }), fc.record({ port: fc.integer({ min: 1, max: 65535 }), path: pick('/', '/health') })),
    }),
    fc.record({ tcp: fc.integer({ min: 1, max: 65535 }) }),
    fc.record({ command: pick('test -e /tmp/warm', 'curl -sf localhost:8000') }),
  ),
  pick({}, { tcp: 80, command: 'x' }, { http: null }, { command: '' }, { http: { port: 80, path: 'a b' } }),
).chain((check) =>
  fc
    .record({ interval: probeTimeArb, timeout: probeTimeArb, min: mostly(pick(1, '1', '50%', '100%'), pick(0, '0%', '150%', 'x', 5)) }, { requiredKeys: [] })
    .map((timing) => ({ ...check, ...timing })),
);

/** Troupe's heal-and-scale extensions of a group (a range for `nodes`, restart policies, the peers hook). */
const nodesArb = mostly(
  fc.oneof({ arbitrary: fc.integer({ min: 1, max: 4 }), weight: 3 }, pick('1..3', '2..2', { min: 1, max: 4 })),
  pick(0, -1, '2', 1000, 2048, 4096, 4097, '2..', '..3', '3..1', '0..2', { min: 2 }, '1..5000'),
  10,
);
const onFailureArb = mostly(
  pick('restart-node', 'restart-group', 'fail-run', { action: 'restart-node', max_restarts: 2, within: '10m' }, { action: 'restart-group' }),
  pick('reboot', { action: 'fail-run', max_restarts: 1 }, { max_restarts: 1 }, { action: 'restart-node', within: 0 }, ['x']),
);

/** `${{ groups[i].nodes[j].IP_ADDRESS }}` inside a command, sometimes out of range or malformed. */
const commandArb = mostly(
  fc.oneof(
    freeTextArb,
    pick('curl http://${{ groups[0].nodes[0].IP_ADDRESS }}:8000', 'echo $${{ not a reference }}', 'python -m server --port 8000'),
  ),
  fc.oneof(
    fc.tuple(fc.nat(5), fc.nat(3)).map(([g, n]) => `curl http://\${{ groups[${g}].nodes[${n}].IP_ADDRESS }}:8000`),
    pick('echo ${{ groups[0].nodes[0].IP }}', 'echo ${{', 'echo ${{ secrets.HF_TOKEN }}'),
  ),
  6,
);

const envArb = fc.oneof(
  fc.uniqueArray(
    mostly(
      fc.oneof(fc.tuple(envKeyArb, freeTextArb).map(([k, v]) => `${k}=${v}`), pick('HF_TOKEN', 'MODEL_ID=meta-llama/Llama-3.2-3B-Instruct')),
      pick('NOT_IN_SHELL', '1BAD=x', '=x', 'A=${{ groups[0].nodes[0].IP_ADDRESS }}', 'A B=c'),
    ),
    { maxLength: 5, selector: (e) => e.split('=')[0] },
  ),
  fc.dictionary(envKeyArb, mostly(freeTextArb, pick(null, 1.5, true, ['x'])), { maxKeys: 5 }),
);

const groupNamesArb = fc.uniqueArray(groupNameArb, { minLength: 1, maxLength: 5 });

/** Groups with mostly distinct names, dependencies mostly on other groups' names. */
const groupsArb = groupNamesArb.chain((names) =>
  fc.tuple(
    ...names.map((name) => {
      const others = names.filter((n) => n !== name);
      return fc.record(
        {
          name: mostly(fc.constant(name), pick(names[0] ?? 'a', 'Bad Name', 'x'.repeat(41), 7, null)),
          nodes: nodesArb,
          commands: fc.array(commandArb, { minLength: 1, maxLength: 3 }),
          ports: fc.array(portArb, { maxLength: 2 }),
          resources: resourcesArb,
          depends_on: mostly(fc.subarray(others, { maxLength: Math.min(2, others.length) }), pick(['nope'], [name])),
          ready: readyArb,
          on_failure: onFailureArb,
          on_dependency_restart: mostly(pick('keep', 'restart'), pick('maybe', 1)),
          on_peers_change: mostly(pick('echo $TROUPE_PEERS_VERSION'), pick('', ['x'])),
        },
        { requiredKeys: ['commands'] },
      );
    }),
  ),
);

/** A task as a user might write it: mostly valid, with the mistakes users make. */
export const taskArb = fc
  .record(
    {
      type: mostly(fc.constant('task'), pick('fleet', 'service', 'Task'), 30),
      name: mostly(runNameArb, pick('Bad_Name', 'a', '9lives', 'x'.repeat(50))),
      image: pick('lmsysorg/sglang:latest', 'ubuntu', ''),
      env: envArb,
      startup_order: pick('any', 'master-first', 'workers-first'),
      stop_criteria: mostly(pick('all-done', 'master-done'), pick('some-done')),
      retry: retryArb,
      max_duration: mostly(fc.oneof(durationArb, pick('off')), pick(-5)),
      working_dir: mostly(pick('/workflow', '/'), pick('relative/dir')),
      fleets: fc.array(runNameArb, { maxLength: 2 }),
    },
    { requiredKeys: ['type'] },
  )
  .chain((head) =>
    fc.oneof(
      fc
        .record(
          {
            nodes: mostly(fc.integer({ min: 1, max: 8 }), pick(0, 4096, 4097, 1_000_000)),
            commands: fc.array(commandArb, { minLength: 1, maxLength: 3 }),
            ports: fc.array(portArb, { maxLength: 2 }),
            resources: resourcesArb,
          },
          { requiredKeys: ['commands'] },
        )
        .map((body) => ({ ...head, ...body })),
      groupsArb.map((groups) => {
        // A startup order beside depends_on is refused; keep that mistake rare.
        const { startup_order: order, ...rest } = head;
        const usesDeps = groups.some((g) => Array.isArray(g.depends_on) && g.depends_on.length > 0);
        return { ...(usesDeps ? rest : head), ...(usesDeps && order === 'any' ? { startup_order: order } : {}), groups };
      }),
    ),
  );

/**
 * A task that follows every rule (unique names, references in range, a dependency DAG, NVIDIA or
 * no GPU, at most 4096 nodes): it must always plan, and the plan must say what the task says.
 */
export const validTaskArb = fc
  .record({
    name: runNameArb,
    image: fc.option(pick('lmsysorg/sglang:latest', 'ubuntu:24.04'), { nil: undefined }),
    env: fc.uniqueArray(fc.tuple(envKeyArb, freeTextArb.filter((v) => !v.includes('${{'))), { selector: ([k]) => k, maxLength: 5 }),
    envStyle: pick('list', 'map'),
    order: fc.option(pick('any', 'master-first', 'workers-first'), { nil: undefined }),
    stop: fc.option(pick('all-done', 'master-done'), { nil: undefined }),
    groups: fc.uniqueArray(
      fc.record({
        name: groupNameArb,
        nodes: fc.integer({ min: 1, max: 6 }),
        cpu: fc.option(fc.oneof(count, pick('2..8', '4..', 'x86:4')), { nil: undefined }),
        memory: fc.option(pick('8GB', '16GB..', '1TB', '512MB..'), { nil: undefined }),
        gpu: fc.option(fc.oneof(nvidiaNameArb, nvidiaNameArb.map((n) => `${n}:2`), pick('nvidia:24GB..:1..4', 0)), { nil: undefined }),
        ports: fc.array(fc.integer({ min: 1, max: 65535 }), { maxLength: 2 }),
        refs: fc.array(fc.tuple(fc.nat(), fc.nat()), { maxLength: 3 }),
        deps: fc.array(fc.nat(), { maxLength: 2 }),
      }),
      { selector: (g) => g.name, minLength: 1, maxLength: 6 },
    ),
  })
  .map((spec) => {
    const useDeps = spec.order === undefined && spec.groups.length > 1 && spec.groups.some((g) => g.deps.length > 0);
    const groups = spec.groups.map((g, i) => {
      const commands = [
        `echo ${g.name}`,
        ...g.refs.map(([gi, ni]) => {
          const target = spec.groups[gi % spec.groups.length];
          return `curl http://\${{ groups[${gi % spec.groups.length}].nodes[${ni % (target?.nodes ?? 1)}].IP_ADDRESS }}:8000`;
        }),
      ];
      // Only on earlier groups: no cycle.
      const dependsOn = useDeps && i > 0 ? [...new Set(g.deps.map((d) => spec.groups[d % i]?.name ?? ''))] : [];
      const resources = Object.fromEntries(
        Object.entries({ cpu: g.cpu, memory: g.memory, gpu: g.gpu }).filter(([, v]) => v !== undefined),
      );
      return {
        name: g.name,
        nodes: g.nodes,
        commands,
        ...(g.ports.length > 0 ? { ports: g.ports } : {}),
        ...(Object.keys(resources).length > 0 ? { resources } : {}),
        ...(dependsOn.length > 0 ? { depends_on: dependsOn } : {}),
      };
    });
    const config: Record<string, unknown> = {
      type: 'task',
      name: spec.name,
      ...(spec.image !== undefined ? { image: spec.image } : {}),
      ...(spec.env.length > 0
        ? { env: spec.envStyle === 'list' ? spec.env.map(([k, v]) => `${k}=${v}`) : Object.fromEntries(spec.env) }
        : {}),
      ...(spec.order !== undefined && !useDeps ? { startup_order: spec.order } : {}),
      ...(spec.stop !== undefined ? { stop_criteria: spec.stop } : {}),
      groups,
    };
    return { config, expectedEnv: Object.fromEntries(spec.env), groups };
  });

const hostnameArb = fc.oneof(
  fc.ipV4(),
  fc.domain(),
  pick('10.0.0.1', '89.169.102.124', 'gpu-1.internal', '::1', 'fe80::1', 'localhost'),
);

const sshPortArb = mostly(fc.integer({ min: 1, max: 65535 }), pick(0, 70000, '22', 'ssh', -1));
const keyFileArb = mostly(pick('~/.ssh/id_rsa', '/keys/a', 'relative/key'), pick('', null, 5));

const proxyJumpArb = fc.record(
  { hostname: hostnameArb, port: sshPortArb, user: pick('ubuntu', 'root'), identity_file: keyFileArb },
  { requiredKeys: ['hostname', 'user', 'identity_file'] },
);

const hostArb = fc.oneof(
  hostnameArb,
  fc.record(
    {
      hostname: hostnameArb,
      port: sshPortArb,
      user: mostly(pick('dstack', 'ubuntu', 'root'), pick('', null)),
      identity_file: keyFileArb,
      proxy_jump: mostly(proxyJumpArb, pick({ hostname: 'j' }, 'jump-host', { ssh_key: 'x' })),
      blocks: mostly(fc.oneof(fc.integer({ min: 1, max: 8 }), pick('auto')), pick(0, 'many')),
    },
    { requiredKeys: ['hostname'] },
  ),
);

/** Either every host has an `internal_ip` or none (the rule), sometimes broken. */
const hostsArb = fc
  .tuple(fc.array(hostArb, { minLength: 1, maxLength: 5 }), fc.boolean(), fc.nat())
  .map(([hosts, withInternal, seed]) => {
    if (!withInternal) return hosts;
    const breakRule = seed % 10 === 0;
    const ips = ['10.0.0.5', '192.168.1.7', 'fd00::5', '10.1.2.3', '172.16.0.9'];
    return hosts.map((host, i) => {
      const mapping = typeof host === 'string' ? { hostname: host } : host;
      if (breakRule && i === seed % hosts.length) return mapping;
      const broken = seed % 2 === 0 ? '8.8.8.8' : 'not-an-ip';
      const ip = breakRule && i === (seed + 1) % hosts.length ? broken : (ips[(seed + i) % ips.length] ?? '10.0.0.5');
      return { ...mapping, internal_ip: ip };
    });
  });

/** A fleet as a user might write it. */
export const fleetArb = fc.record(
  {
    type: mostly(fc.constant('fleet'), pick('task', 'gateway'), 30),
    name: mostly(runNameArb, pick('Bad_Name', 'x')),
    placement: mostly(pick('any', 'cluster'), pick('spread')),
    blocks: mostly(fc.oneof(fc.integer({ min: 1, max: 8 }), pick('auto')), pick(0)),
    env: envArb,
    ssh_config: fc.record(
      {
        user: pick('dstack', 'ubuntu'),
        port: sshPortArb,
        identity_file: keyFileArb,
        proxy_jump: proxyJumpArb,
        network: mostly(pick('10.0.0.0/24', '192.168.0.0/16', '10.0.0.0/255.255.255.0', 'fd00::/8'), pick('8.8.8.0/24', 'nonsense', '10.0.0.0/33')),
        hosts: hostsArb,
      },
      { requiredKeys: ['hosts'] },
    ),
  },
  { requiredKeys: ['type', 'ssh_config'] },
).chain((fleet) => {
  // `network` beside `internal_ip` is refused: keep that mistake rare.
  const { network, ...ssh } = fleet.ssh_config;
  const internal = ssh.hosts.some((h) => typeof h === 'object' && 'internal_ip' in h);
  if (!internal || network === undefined) return fc.constant(fleet);
  return mostly(fc.constant({ ...fleet, ssh_config: ssh }), fc.constant(fleet), 10);
});

// ---------------------------------------------------------------- YAML text

export type YamlStyle = {
  collectionStyle: 'any' | 'block' | 'flow';
  defaultStringType: 'PLAIN' | 'QUOTE_DOUBLE' | 'QUOTE_SINGLE' | 'BLOCK_LITERAL' | 'BLOCK_FOLDED';
  indent: number;
};

export const yamlStyleArb: fc.Arbitrary<YamlStyle> = fc.record({
  collectionStyle: fc.constantFrom('any' as const, 'block' as const, 'flow' as const),
  defaultStringType: fc.constantFrom('PLAIN' as const, 'QUOTE_DOUBLE' as const, 'QUOTE_SINGLE' as const, 'BLOCK_LITERAL' as const, 'BLOCK_FOLDED' as const),
  indent: fc.integer({ min: 1, max: 4 }),
});

/** The config as YAML 1.1 (so `on`, `yes`, `0x1` come out quoted), in the given style. */
export function toYaml(value: unknown, style: YamlStyle): string {
  return stringify(value, { version: '1.1', lineWidth: 0, ...style });
}

// ---------------------------------------------------------------- mutations

type Path = (string | number)[];

/** Every path into a value (objects and arrays), the root included. */
function allPaths(value: unknown, prefix: Path = []): Path[] {
  const out: Path[] = [prefix];
  if (Array.isArray(value)) value.forEach((v, i) => out.push(...allPaths(v, [...prefix, i])));
  else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) out.push(...allPaths(v, [...prefix, k]));
  }
  return out;
}

function getAt(root: unknown, path: Path): unknown {
  let node = root;
  for (const p of path) node = (node as Record<string | number, unknown>)[p];
  return node;
}

function setAt(root: unknown, path: Path, value: unknown): unknown {
  if (path.length === 0) return value;
  const parent = getAt(root, path.slice(0, -1)) as Record<string | number, unknown>;
  parent[path[path.length - 1] as string | number] = value;
  return root;
}

function deleteAt(root: unknown, path: Path): unknown {
  if (path.length === 0) return root;
  const parent = getAt(root, path.slice(0, -1));
  const last = path[path.length - 1] as string | number;
  if (Array.isArray(parent) && typeof last === 'number') parent.splice(last, 1);
  else delete (parent as Record<string | number, unknown>)[last];
  return root;
}

/** Values of every YAML-visible type, including the edges: huge, negative, fractional, empty. */
export const anyValueArb: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  pick(0, -1, -0.5, 1e21, 1e300, -1e300, 2 ** 53, 4097, '', ' ', '..', '1..0', '-1', 'null', '~', 'on', 'off', '1e3', '0x10', '1:30', '.inf', 'NaN'),
  fc.double(),
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map((n) => n.toString()),
);

export type StructuralMutation =
  | { kind: 'delete'; at: number }
  | { kind: 'retype'; at: number; value: unknown }
  | { kind: 'swap'; at: number; other: number }
  | { kind: 'unknown-key'; at: number; key: string; value: unknown }
  | { kind: 'wrap-in-list'; at: number };

export const structuralMutationArb: fc.Arbitrary<StructuralMutation> = fc.oneof(
  fc.record({ kind: fc.constant('delete' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('retype' as const), at: fc.nat(), value: anyValueArb }),
  fc.record({ kind: fc.constant('swap' as const), at: fc.nat(), other: fc.nat() }),
  fc.record({
    kind: fc.constant('unknown-key' as const),
    at: fc.nat(),
    key: fc.oneof(pick('__proto__', 'constructor', 'toString', 'entrypoint', 'nodes', 'groups', 'hasOwnProperty', 'min', 'ssh_key', ''), fc.string({ maxLength: 8 })),
    value: anyValueArb,
  }),
  fc.record({ kind: fc.constant('wrap-in-list' as const), at: fc.nat() }),
);

export function applyStructural(config: unknown, mutations: readonly StructuralMutation[]): unknown {
  let root = structuredClone(config);
  for (const m of mutations) {
    const paths = allPaths(root);
    const path = paths[m.at % paths.length] ?? [];
    switch (m.kind) {
      case 'delete':
        root = deleteAt(root, path);
        break;
      case 'retype':
        root = setAt(root, path, structuredClone(m.value));
        break;
      case 'swap': {
        const other = paths[m.other % paths.length] ?? [];
        // A path inside the other would make a cycle: only swap disjoint subtrees.
        const nested = (a: Path, b: Path) => a.length <= b.length && a.every((p, i) => p === b[i]);
        if (nested(path, other) || nested(other, path)) break;
        const a = structuredClone(getAt(root, path));
        const b = structuredClone(getAt(root, other));
        root = setAt(setAt(root, path, b), other, a);
        break;
      }
      case 'unknown-key': {
        const target = getAt(root, path);
        if (target !== null && typeof target === 'object' && !Array.isArray(target)) {
          Object.defineProperty(target, m.key, { value: structuredClone(m.value), enumerable: true, configurable: true, writable: true });
        }
        break;
      }
      case 'wrap-in-list':
        root = setAt(root, path, [getAt(root, path)]);
        break;
    }
  }
  return root;
}

/** YAML syntax a broken or hostile file contains. */
const yamlSnippets = [
  '&a ', '*a', '*missing', '&a [x, *a] ', '<<: *a\n', '<<: ', '!!str ', '!!int ', '!!float ', '!!binary ', '!!map ', '!!seq ', '!!set ',
  '!!omap ', '!!python/object:os.system ', '!custom ', '!<tag:yaml.org,2002:str> ', '\t', '? ', ': ', '- ', '{', '}', '[', ']', ',',
  '|', '|-', '>', '>+', '"', "'", '\\', '#', '%YAML 1.1\n', '%TAG ! tag:x,2000:\n', '---\n', '...\n', '\n---\n', '\r', '\r\n', '\u0000',
  '\uFEFF', '\u2028', '\uD800', '\u00A0', '\x7f', '\x1b[31m', '@', '`', '${{ ', ' }}', '$${{', 'groups[0].nodes[0].IP_ADDRESS', '~',
  'null', 'true', 'on', '.inf', '-.inf', '.nan', '0x7fffffffffffffffff', '1e400', '99999999999999999999w', '0o777', '1:30:00', '2001-12-14',
];

export type TextMutation =
  | { kind: 'truncate'; at: number }
  | { kind: 'flip'; at: number; bit: number }
  | { kind: 'insert'; at: number; text: string }
  | { kind: 'duplicate-line'; at: number }
  | { kind: 'delete-line'; at: number }
  | { kind: 'indent-line'; at: number; by: string }
  | { kind: 'swap-lines'; at: number; other: number };

export const textMutationArb: fc.Arbitrary<TextMutation> = fc.oneof(
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({
    kind: fc.constant('insert' as const),
    at: fc.nat(),
    text: fc.oneof({ arbitrary: fc.constantFrom(...yamlSnippets), weight: 4 }, { arbitrary: fc.string({ unit: 'binary', maxLength: 6 }), weight: 1 }),
  }),
  fc.record({ kind: fc.constant('duplicate-line' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('delete-line' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('indent-line' as const), at: fc.nat(), by: pick(' ', '  ', '\t', '-1', '-2') }),
  fc.record({ kind: fc.constant('swap-lines' as const), at: fc.nat(), other: fc.nat() }),
);

export function applyText(text: string, mutations: readonly TextMutation[]): string {
  let out = text;
  for (const m of mutations) {
    const lines = out.split('\n');
    const line = m.at % Math.max(1, lines.length);
    switch (m.kind) {
      case 'truncate':
        out = out.slice(0, m.at % (out.length + 1));
        break;
      case 'flip': {
        if (out.length === 0) break;
        const i = m.at % out.length;
        out = out.slice(0, i) + String.fromCharCode(out.charCodeAt(i) ^ (1 << m.bit)) + out.slice(i + 1);
        break;
      }
      case 'insert': {
        const i = m.at % (out.length + 1);
        out = out.slice(0, i) + m.text + out.slice(i);
        break;
      }
      case 'duplicate-line':
        lines.splice(line, 0, lines[line] ?? '');
        out = lines.join('\n');
        break;
      case 'delete-line':
        lines.splice(line, 1);
        out = lines.join('\n');
        break;
      case 'indent-line': {
        const current = lines[line] ?? '';
        lines[line] = m.by.startsWith('-') ? current.replace(new RegExp(`^ {0,${m.by.slice(1)}}`), '') : m.by + current;
        out = lines.join('\n');
        break;
      }
      case 'swap-lines': {
        const other = m.other % Math.max(1, lines.length);
        const a = lines[line] ?? '';
        lines[line] = lines[other] ?? '';
        lines[other] = a;
        out = lines.join('\n');
        break;
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------- outcomes

/**
 * A call that takes more CPU time than this is a failure: the planner runs before anything starts,
 * on every `troupe plan`. CPU time, not the wall clock, which under load also counts the wait for a
 * core (test/helpers/cpu-time.ts).
 */
export const CALL_LIMIT_MS = 2_000;
/** What every refusal looks like: `file:line:col: path: reason`, one line. */
export const REFUSAL_LINE = /^[^\n]+:\d+:\d+: [^\n]+: [^\n]+$/;

export const FILE = 'fuzz/config.yml';

/** Runs `load` on the text, bounded in time; returns its result or its ConfigError, rethrows anything else with the input. */
export function outcome<T>(text: string, load: () => T): { ok: true; value: T } | { ok: false; error: ConfigError | null } {
  watchdog.enter(text);
  const started = process.cpuUsage();
  let result: { ok: true; value: T } | { ok: false; error: ConfigError | null };
  try {
    result = { ok: true, value: load() };
  } catch (err) {
    const known = knownBug(err);
    if (!(err instanceof ConfigError) && !known) {
      const stack = err instanceof Error ? (err.stack ?? err.message) : String(err);
      throw new Error(`not a ConfigError on input ${JSON.stringify(text)}:\n${stack}`);
    }
    // A known bug's refusal is not checked further (its regression test pins it).
    result = { ok: false, error: known ? null : (err as ConfigError) };
  } finally {
    watchdog.leave();
  }
  const used = process.cpuUsage(started);
  const ms = (used.user + used.system) / 1000;
  if (ms > CALL_LIMIT_MS) throw new Error(`one call took ${Math.round(ms)} ms of CPU (limit ${CALL_LIMIT_MS}) on input ${JSON.stringify(text)}`);
  if (!result.ok && result.error) checkRefusal(result.error, text);
  return result;
}

/**
 * Failures this fuzz found and that are reported but not fixed yet, each pinned by an `it.fails`
 * regression in hostile-config.test.ts. They are let through here so the fuzz keeps looking for
 * new ones; delete an entry once its regression passes (vitest then flags that `it.fails`).
 */
const KNOWN_BUGS: { what: string; matches: (err: unknown) => boolean }[] = [];

function knownBug(err: unknown): boolean {
  return KNOWN_BUGS.some((bug) => bug.matches(err));
}

/** A cheap assertion: tens of thousands of cases run through these. */
function must(condition: boolean, what: string, text: string): void {
  if (!condition) throw new Error(`${what}, on input ${JSON.stringify(text)}`);
}

export function checkRefusal(error: ConfigError, text: string, file = FILE): void {
  const message = JSON.stringify(error.message);
  must(REFUSAL_LINE.test(error.message), `refusal ${message} is not one line "file:line:col: path: reason"`, text);
  must(error.message.startsWith(`${file}:${error.line}:${error.col}: `), `refusal ${message} does not start with its position`, text);
  // The position is in the file: a line it has, a column on that line (or just past its end).
  const lines = text.split('\n');
  must(error.line >= 1 && error.line <= lines.length, `refusal ${message} points at line ${error.line} of ${lines.length}`, text);
  const width = (lines[error.line - 1]?.length ?? 0) + 1;
  must(error.col >= 1 && error.col <= width, `refusal ${message} points at column ${error.col} of ${width}`, text);
}

/** The plan's invariants (design.md, "Words"): one global rank space, masters, sizes, plain JSON. */
export function checkPlan(plan: Plan, runName: string | undefined, text: string): void {
  const schema = PlanSchema.safeParse(plan);
  must(schema.success, `the plan fails its own schema: ${schema.error?.message}`, text);
  must(isDeepStrictEqual(JSON.parse(JSON.stringify(plan)), stripUndefined(plan)), 'the plan is not plain JSON', text);
  if (runName !== undefined) must(plan.run_name === runName, `run_name ${plan.run_name}, not the -n name ${runName}`, text);
  must(/^[a-z][a-z0-9-]{1,40}$/.test(plan.run_name), `run_name ${JSON.stringify(plan.run_name)} is not a run name`, text);
  const sum = plan.groups.reduce((total, g) => total + g.nodes, 0);
  must(plan.nodes_num === sum, `nodes_num ${plan.nodes_num} is not the sum of the groups' nodes ${sum}`, text);
  must(plan.nodes_num <= 4096, `nodes_num ${plan.nodes_num} is over the limit`, text);
  must(plan.jobs.length === plan.nodes_num, `${plan.jobs.length} jobs for ${plan.nodes_num} nodes`, text);
  must(new Set(plan.groups.map((g) => g.name)).size === plan.groups.length, 'two groups share a name', text);
  let n = 0;
  plan.groups.forEach((group, g) => {
    must(group.index === g, `group ${g} has index ${group.index}`, text);
    for (let k = 0; k < group.nodes; k++, n++) {
      const job = plan.jobs[n];
      must(
        job !== undefined &&
          job.job_num === n &&
          job.job_name === `${plan.run_name}-${n}-0` &&
          job.node_group_index === g &&
          job.node_group_name === group.name &&
          job.node_group_job_index === k &&
          job.global_master === (n === 0) &&
          job.group_master === (k === 0) &&
          isDeepStrictEqual(job.commands, group.commands),
        `job ${n} is not node ${k} of group ${g}: ${JSON.stringify(job)}`,
        text,
      );
    }
  });
  for (const [key, value] of Object.entries(plan.env)) must(typeof value === 'string', `env ${key} is not a string`, text);
}

export function checkFleet(fleet: FleetConfig, text: string): void {
  const schema = FleetConfigSchema.safeParse(fleet);
  must(schema.success, `the fleet fails its own schema: ${schema.error?.message}`, text);
  must(isDeepStrictEqual(JSON.parse(JSON.stringify(fleet)), stripUndefined(fleet)), 'the fleet is not plain JSON', text);
  must(fleet.hosts.length >= 1, 'a fleet without hosts', text);
  const addresses = fleet.hosts.map((h) => `${h.hostname}:${h.port}`);
  must(new Set(addresses).size === addresses.length, `a host is listed twice: ${addresses.join(', ')}`, text);
  for (const host of fleet.hosts) {
    must(Number.isInteger(host.port) && host.port >= 1 && host.port <= 65535, `port ${host.port}`, text);
    must(host.user.length > 0 && host.identity_file.length > 0, `host ${host.hostname} without user or key`, text);
  }
  const withInternal = fleet.hosts.filter((h) => h.internal_ip !== null).length;
  must(withInternal === 0 || withInternal === fleet.hosts.length, 'internal_ip on some hosts only', text);
}

/** JSON drops `undefined` fields; compare against the value without them. */
function stripUndefined(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(stripUndefined);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [k, stripUndefined(v)]));
  }
  return value;
}

// ---------------------------------------------------------------- watchdog

/**
 * A call that never returns blocks the test's own timers, so a thread watches it: past the limit
 * it prints the input and kills the test process, which vitest reports as a failed file.
 */
const WATCHDOG_LIMIT_MS = 20_000;
const MAX_SHARED_CHARS = 256 * 1024;

const watchdogSource = `
const { workerData } = require('node:worker_threads');
const { sab, limitMs } = workerData;
const started = new Float64Array(sab, 0, 1);
const length = new Int32Array(sab, 8, 1);
const chars = new Uint16Array(sab, 12, ${MAX_SHARED_CHARS});
setInterval(() => {
  const at = started[0];
  if (at > 0 && Date.now() - at > limitMs) {
    let text = '';
    for (let i = 0; i < length[0]; i += 4096) text += String.fromCharCode(...chars.subarray(i, Math.min(length[0], i + 4096)));
    require('node:fs').writeSync(2, 'fuzz watchdog: a call ran over ' + limitMs + ' ms (a hang) on input ' + JSON.stringify(text) + '\\n');
    process.kill(process.pid, 'SIGKILL');
  }
}, 250);
`;

class Watchdog {
  private readonly sab = new SharedArrayBuffer(12 + MAX_SHARED_CHARS * 2);
  private readonly started = new Float64Array(this.sab, 0, 1);
  private readonly length = new Int32Array(this.sab, 8, 1);
  private readonly chars = new Uint16Array(this.sab, 12, MAX_SHARED_CHARS);
  private worker: Worker | null = null;

  private readonly emitWarning = process.emitWarning;

  start(): void {
    // The YAML library warns on stderr at every complex key it meets (reported; not what is tested here).
    const emit = this.emitWarning;
    process.emitWarning = ((warning: string | Error, ...rest: unknown[]) => {
      if (String(warning).includes('Keys with collection values will be stringified')) return;
      (emit as (...args: unknown[]) => void).call(process, warning, ...rest);
    }) as typeof process.emitWarning;
    this.worker ??= new Worker(watchdogSource, { eval: true, workerData: { sab: this.sab, limitMs: WATCHDOG_LIMIT_MS } });
    this.worker.unref();
  }

  async stop(): Promise<void> {
    process.emitWarning = this.emitWarning;
    await this.worker?.terminate();
    this.worker = null;
  }

  enter(text: string): void {
    const n = Math.min(text.length, MAX_SHARED_CHARS);
    for (let i = 0; i < n; i++) this.chars[i] = text.charCodeAt(i);
    this.length[0] = n;
    this.started[0] = Date.now();
  }

  leave(): void {
    this.started[0] = 0;
  }
}

export const watchdog = new Watchdog();

/** fast-check settings: FUZZ_SEED replays a failure, FUZZ_SCALE runs more (or fewer) cases. */
export function fuzzParams(numRuns: number): fc.Parameters<unknown> {
  const seed = process.env.FUZZ_SEED;
  const scale = Number(process.env.FUZZ_SCALE ?? 1);
  return {
    numRuns: Math.max(1, Math.round(numRuns * scale)),
    ...(seed !== undefined ? { seed: Number(seed) } : {}),
  };
}

/** A config generator as YAML texts: as generated, structurally mutated, and textually mutated. */
export function configTextArbs(configArb: fc.Arbitrary<unknown>) {
  return {
    generated: fc.tuple(configArb, yamlStyleArb).map(([config, style]) => toYaml(config, style)),
    structural: fc
      .tuple(configArb, fc.array(structuralMutationArb, { minLength: 1, maxLength: 4 }), yamlStyleArb)
      .map(([config, mutations, style]) => toYaml(applyStructural(config, mutations), style)),
    textual: fc
      .tuple(configArb, yamlStyleArb, fc.array(textMutationArb, { minLength: 1, maxLength: 5 }))
      .map(([config, style, mutations]) => applyText(toYaml(config, style), mutations)),
  };
}
