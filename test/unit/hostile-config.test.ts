import { existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors';
import { loadFleetConfig, loadPlan, MAX_TOTAL_NODES, type Plan } from '../../src/plan';
import { cpuTimed } from '../helpers/cpu-time';

/**
 * Hand-written hostile task configs: sizes past every limit, YAML built to explode or to blow the
 * stack, very long strings, shell metacharacters. Each must end fast in a plan or in a refusal
 * that is one short line pointing into the file; nothing is ever executed while planning.
 */

const FILE = 'hostile.yml';
/** A refusal is read by a person: the position, the field and the reason, never the input itself. */
const MAX_REFUSAL_CHARS = 500;
const REFUSAL_LINE = /^[^\n]+:\d+:\d+: [^\n]+: [^\n]+$/;

function plan(text: string, environ: Record<string, string> = {}): Plan {
  return loadPlan(text, FILE, { environ, runName: 'hostile' });
}

/**
 * Plans `text`, expecting a short one-line refusal within `cpuCeilingMs` of CPU time (see cpuTimed:
 * load cannot trip it; an expanded alias bomb, a quadratic pass or an endless loop still does);
 * returns it.
 */
function refusal(text: string, cpuCeilingMs = 2_000, load: (text: string) => unknown = plan): ConfigError {
  const { value, error, cpuMs } = cpuTimed(() => load(text));
  expect(cpuMs, 'CPU time to refuse').toBeLessThan(cpuCeilingMs);
  expect(value, 'a plan for hostile input').toBeUndefined();
  expect(error).toBeInstanceOf(ConfigError);
  const message = (error as ConfigError).message;
  expect(message).toMatch(REFUSAL_LINE);
  expect(message.length, `refusal of ${message.length} characters: ${message.slice(0, 200)}…`).toBeLessThanOrEqual(MAX_REFUSAL_CHARS);
  return error as ConfigError;
}

const yaml = (...lines: string[]) => `${lines.join('\n')}\n`;

describe('huge node counts: a documented limit of 4,096 nodes per run', () => {
  it('nodes: 1000000 is refused at `nodes`, naming the count and the limit', () => {
    const error = refusal(yaml('type: task', 'commands: [x]', 'nodes: 1000000'));
    expect(error.message).toBe(`${FILE}:3:8: nodes: the task asks for 1000000 nodes; a run has at most ${MAX_TOTAL_NODES}`);
  });

  it('4,097 nodes spread over groups is refused at `groups`', () => {
    const error = refusal(
      yaml('type: task', 'groups:', '  - {name: a, nodes: 4000, commands: [x]}', '  - {name: b, nodes: 96, commands: [x]}', '  - {name: c, nodes: 1, commands: [x]}'),
    );
    expect(error.message).toBe(`${FILE}:3:3: groups: the task asks for 4097 nodes; a run has at most ${MAX_TOTAL_NODES}`);
  });

  it('exactly 4,096 nodes over groups plans, fast, with every rank in place', () => {
    const text = yaml('type: task', 'groups:', '  - {name: a, nodes: 4000, commands: [x]}', '  - {name: b, nodes: 95, commands: [x]}', '  - {name: c, nodes: 1, commands: [x]}');
    const { value, cpuMs } = cpuTimed(() => plan(text));
    expect(cpuMs).toBeLessThan(2_000);
    expect(value?.nodes_num).toBe(4096);
    expect(value?.jobs.map((j) => j.job_num)).toEqual([...Array(4096).keys()]);
    expect(value?.jobs[4095]).toMatchObject({ job_name: 'hostile-4095-0', node_group_name: 'c', group_master: true });
  });

  it.each([
    ['a number past 2^53', '99999999999999999999'],
    ['an exponent', '1.0e+400'],
    ['infinity', '.inf'],
    ['not a number', '.nan'],
    ['negative', '-4'],
    ['zero', '0'],
    ['a fraction', '2.5'],
  ])('nodes as %s (%s) is refused as not a node count', (_what, value) => {
    const error = refusal(yaml('type: task', 'commands: [x]', `nodes: ${value}`));
    expect(error.path).toBe('nodes');
    expect(error.line).toBe(3);
  });

  it.each([
    ['gpu: -2', 'resources.gpu', '"-2" is negative: counts and sizes are 0 or more'],
    ['gpu: "nvidia:-1"', 'resources.gpu', '"-1" is negative: counts and sizes are 0 or more'],
    ['memory: "-5GB"', 'resources.memory', '"-5GB" is negative: counts and sizes are 0 or more'],
    ['disk: 0..-1', 'resources.disk', '"-1" is negative: counts and sizes are 0 or more'],
    ['shm_size: "-1GB"', 'resources.shm_size', '"-1GB" is negative: counts and sizes are 0 or more'],
    ['memory: 99999999999999999999999TB', 'resources.memory', '"99999999999999999999999TB" is beyond any machine: at most 1,073,741,824 GB (1 EB)'],
    ['shm_size: 5000000000TB', 'resources.shm_size', '"5000000000TB" is beyond any machine: at most 1,073,741,824 GB (1 EB)'],
    ['gpu: 2000000', 'resources.gpu', '"2000000" is beyond any machine: at most 1,000,000'],
  ])('resources `%s` is refused: no negative or absurd size or count', (line, path, reason) => {
    const error = refusal(yaml('type: task', 'commands: [x]', 'resources:', `  ${line}`));
    expect(error.path).toBe(path);
    expect(error.reason).toBe(reason);
  });

  it('disk: -0 plans as 0, which JSON keeps', () => {
    const value = plan(yaml('type: task', 'commands: [x]', 'resources:', '  disk: -0'));
    expect(Object.is(value.groups[0]?.resources.disk?.min, 0)).toBe(true);
  });

  it('5,000 one-node groups are refused by the bound on groups, fast', () => {
    const groups = Array.from({ length: 5000 }, (_, i) => `  - {name: g${i}, commands: [x]}`);
    // ~0.6 s of CPU, most of it parsing: a pass over pairs of groups (25 million) would still pass 5 s.
    const error = refusal(yaml('type: task', 'groups:', ...groups), 5_000);
    expect(error.reason).toBe('at most 1024 groups in a task');
  });

  it('1,000 groups of 5 nodes are refused by the node limit', () => {
    const groups = Array.from({ length: 1000 }, (_, i) => `  - {name: g${i}, nodes: 5, commands: [x]}`);
    const error = refusal(yaml('type: task', 'groups:', ...groups));
    expect(error.reason).toBe(`the task asks for 5000 nodes; a run has at most ${MAX_TOTAL_NODES}`);
  });
});

describe('YAML built to explode', () => {
  /** Nine levels of nine aliases each: 9^9 (387 million) strings if expanded. */
  function billionLaughs(where: 'unknown' | 'known'): string {
    const levels = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'];
    const lines = ['type: task', 'commands: [x]', where === 'known' ? 'env:' : 'lol:'];
    lines.push(`  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]`);
    for (let k = 1; k < levels.length; k++) {
      lines.push(`  ${levels[k]}: &${levels[k]} [${Array(9).fill(`*${levels[k - 1]}`).join(', ')}]`);
    }
    return yaml(...lines);
  }

  it.each(['unknown', 'known'] as const)('billion laughs (under an %s field) is refused fast, not expanded', (where) => {
    const heapBefore = process.memoryUsage().heapUsed;
    const error = refusal(billionLaughs(where), 1_000);
    expect(error.reason).toMatch(/alias/i);
    expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(200 * 1024 * 1024);
  });

  it('aliases used for reuse, a few times, still work', () => {
    const result = plan(
      yaml(
        'type: task',
        'groups:',
        '  - name: prefill',
        '    commands: &serve [echo serve]',
        '    resources: &gpu {gpu: L40S}',
        '  - name: decode',
        '    commands: *serve',
        '    resources: *gpu',
      ),
    );
    expect(result.groups.map((g) => [g.name, g.commands, g.resources.gpu.name])).toEqual([
      ['prefill', ['echo serve'], ['L40S']],
      ['decode', ['echo serve'], ['L40S']],
    ]);
  });

  // Reported: an undefined alias is said to "expand to too many nodes", at 1:1.
  it('an alias to an anchor that does not exist is refused at the alias, naming it', () => {
    const error = refusal(yaml('type: task', 'commands: *nope'));
    expect(error.reason).not.toMatch(/too many/);
    expect(error.reason).toMatch(/nope/);
    expect([error.line, error.col]).toEqual([2, 11]);
  });

  it('an alias that refers to itself is refused, not followed forever', () => {
    refusal(yaml('type: task', 'commands: &c [x, *c]'));
  });

  it('a merge key (<<) pulling in a huge anchored mapping is bounded like any alias', () => {
    const keys = Array.from({ length: 60 }, (_, i) => `  - *m`);
    refusal(yaml('type: task', 'commands: [x]', 'base: &m {a: 1}', 'merged:', ...keys), 1_000);
  });
});

describe('YAML nested 10,000 levels deep', () => {
  const depth = 10_000;
  // Reported: refused, in one line, but as "YAML syntax error: Maximum call stack size exceeded".
  it.each([
    ['flow sequences', `type: task\ncommands: [x]\nenv: ${'['.repeat(depth)}${']'.repeat(depth)}\n`],
    ['flow mappings', `type: task\ncommands: [x]\nresources: ${'{a: '.repeat(depth)}1${'}'.repeat(depth)}\n`],
    ['block sequences', `type: task\ncommands: [x]\nenv:\n${'- '.repeat(depth)}x\n`],
    // 2,000 levels: 10,000 would pass the file size bound first (48 MiB of indentation).
    ['block mappings', `type: task\ncommands: [x]\nresources:\n${Array.from({ length: 2_000 }, (_, i) => `${' '.repeat(i + 1)}k:`).join('\n')} 1\n`],
  ])('%s: refused fast with a one-line message that says the file nests too deeply', (_what, text) => {
    const error = refusal(text, 3_000);
    expect(error.reason).not.toMatch(/call stack/i);
    expect(error.reason).toMatch(/nest|deep/i);
  });

  it('a fleet nested 10,000 levels deep is refused the same way', () => {
    const text = `type: fleet\nssh_config:\n  hosts: ${'['.repeat(depth)}${']'.repeat(depth)}\n`;
    const error = refusal(text, 3_000, (t) => loadFleetConfig(t, FILE, { environ: {} }));
    expect(error.reason).toMatch(/nest|deep/i);
  });
});

describe('very long strings', () => {
  const tenMb = 'v'.repeat(10 * 1024 * 1024);

  it.each([
    ['a plain scalar', (v: string) => `  A: ${v}`],
    ['a double-quoted scalar', (v: string) => `  A: "${v}"`],
    ['a literal block', (v: string) => `  A: |-\n    ${v}`],
  ])('a 10 MB env value as %s ends in a plan that keeps it whole, or in a short refusal, within 10 s of CPU', (_what, line) => {
    const { value, error, cpuMs } = cpuTimed(() => plan(yaml('type: task', 'commands: [x]', 'env:', line(tenMb))));
    expect(cpuMs).toBeLessThan(10_000);
    if (error !== undefined) {
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).message.length).toBeLessThanOrEqual(MAX_REFUSAL_CHARS);
    } else {
      expect(value?.env.A?.length).toBe(tenMb.length);
    }
  });

  it('a 100,000-character group name is refused by the name rule, without echoing it', () => {
    const error = refusal(yaml('type: task', 'groups:', `  - name: ${'g'.repeat(100_000)}`, '    commands: [x]'));
    expect(error.path).toBe('groups[0].name');
    expect(error.reason).toMatch(/at most 40 characters/);
  });

  it('a 3 MB run name is refused without echoing it', () => {
    const error = refusal(yaml('type: task', `name: ${'n'.repeat(3 * 1024 * 1024)}`, 'commands: [x]'), 5_000, (t) => loadPlan(t, FILE, { environ: {} }));
    expect(error.path).toBe('name');
  });

  it('a 100,000-character depends_on name is refused without echoing it', () => {
    const error = refusal(yaml('type: task', 'groups:', '  - {name: a, commands: [x]}', `  - {name: b, commands: [x], depends_on: [${'d'.repeat(100_000)}]}`));
    expect(error.path).toBe('groups[1].depends_on[0]');
  });

  it('a 100,000-character working_dir that is not absolute is refused without echoing it', () => {
    refusal(yaml('type: task', 'commands: [x]', `working_dir: ${'w'.repeat(100_000)}`));
  });

  it('a 100,000-character malformed reference in a command is refused without echoing it', () => {
    refusal(yaml('type: task', 'commands:', `  - echo \${{ ${'r'.repeat(100_000)} }}`));
  });

  it('a 1 MB mapping key is refused as a YAML error, fast', () => {
    refusal(yaml('type: task', 'commands: [x]', `${'k'.repeat(1024 * 1024)}: 1`));
  });
});

describe('many entries', () => {
  /** The parser's duplicate-key check and the env checks must stay near-linear in the entries. */
  const manyEntries = (text: string, cpuCeilingMs = 3_000) => {
    const { error, cpuMs } = cpuTimed(() => plan(text));
    if (error !== undefined) expect(error).toBeInstanceOf(ConfigError);
    expect(cpuMs).toBeLessThan(cpuCeilingMs);
  };

  // Reported: quadratic (YAML uniqueKeys check and parseEnv's duplicate check): 20,000 keys ~7 s, 100,000 keys ~216 s.
  // At 50,000 keys linear is ~1.6 s of CPU and that quadratic ~45 s: a 15 s ceiling is far from both.
  it('50,000 entries of env as a mapping: a plan or a refusal within 15 s of CPU', () => {
    manyEntries(yaml('type: task', 'commands: [x]', 'env:', ...Array.from({ length: 50_000 }, (_, i) => `  K${i}: v`)), 15_000);
  });

  it.each([
    ['env as a list', (n: number) => yaml('type: task', 'commands: [x]', 'env:', ...Array.from({ length: n }, (_, i) => `  - K${i}=v`))],
    ['commands', (n: number) => yaml('type: task', 'commands:', ...Array.from({ length: n }, (_, i) => `  - echo ${i}`))],
  ])('20,000 entries of %s: a plan or a refusal within 3 s of CPU', (_what, text) => manyEntries(text(20_000)));

  it('50,000 hosts in a fleet: a fleet or a refusal within 5 s of CPU', () => {
    const hosts = Array.from({ length: 50_000 }, (_, i) => `    - 10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
    const text = yaml('type: fleet', 'ssh_config:', '  user: u', '  identity_file: ~/.ssh/id_rsa', '  hosts:', ...hosts);
    const { error, cpuMs } = cpuTimed(() => loadFleetConfig(text, FILE, { environ: {} }));
    if (error !== undefined) expect(error).toBeInstanceOf(ConfigError);
    expect(cpuMs).toBeLessThan(5_000);
  });
});

describe('values that do not fit the plan', () => {
  it.each([
    ['retry.duration in weeks past 2^53 seconds', yaml('type: task', 'commands: [x]', 'retry: {duration: 99999999999999999999w}'), 'retry.duration'],
    ['retry.duration as a huge float', yaml('type: task', 'commands: [x]', 'retry: {duration: 1.0e+300}'), 'retry.duration'],
    ['max_duration in weeks past 2^53 seconds', yaml('type: task', 'commands: [x]', 'max_duration: 99999999999999999999w'), 'max_duration'],
    ['max_duration as a huge float', yaml('type: task', 'commands: [x]', 'max_duration: 1.0e+300'), 'max_duration'],
    ['an infinite probe interval', yaml('type: task', 'groups:', '  - commands: [x]', '    ready: {command: x, interval: .inf}'), 'groups[0].ready.interval'],
    ['an infinite probe timeout', yaml('type: task', 'groups:', '  - commands: [x]', '    ready: {command: x, timeout: .inf}'), 'groups[0].ready.timeout'],
  ])('%s is a ConfigError at the field, not a crash', (_what, text, path) => {
    expect(refusal(text).path).toBe(path);
  });

  it('a NUL byte in an env value is refused at plan time (a shell cannot carry it to the node)', () => {
    expect(refusal(yaml('type: task', 'commands: [x]', 'env:', '  - "A=a\\0b"')).path).toBe('env[0]');
  });

  it('a key with a line break (quoted "a\\nb") still gives a one-line refusal', () => {
    refusal(yaml('type: task', 'commands: [x]', '"a\\nb": 1'));
    refusal(yaml('type: task', 'commands: [x]', 'env:', '  "A\\nB": x'));
    refusal(yaml('type: task', 'commands: [x]', 'env:', '  !!binary Cg==: x'));
  });

  it('a long complex mapping key (`? {…}`) still gives a one-line refusal', () => {
    refusal(yaml('type: task', 'commands: [x]', `? {${'a'.repeat(40)}: ${'b'.repeat(40)}, ${'c'.repeat(40)}: d}`, ': 1'));
  });

  it('`__proto__` is refused as an unknown field, not as a dstack field with an object for a reason', () => {
    const error = refusal(yaml('type: task', 'commands: [x]', '__proto__: {a: 1}'));
    expect(error.reason).not.toMatch(/object Object|dstack/);
  });

  it('an env variable named __proto__ reaches the plan or is refused, never silently dropped', () => {
    const { value, error } = cpuTimed(() => plan(yaml('type: task', 'commands: [x]', 'env:', '  __proto__: x')));
    if (error === undefined) expect(Object.getOwnPropertyDescriptor(value?.env, '__proto__')?.value).toBe('x');
    else expect(error).toBeInstanceOf(ConfigError);
  });
});

describe('shell metacharacters', () => {
  const canary = join(tmpdir(), `troupe-hostile-canary-${process.pid}`);
  const hostile = [
    `$(touch ${canary})`,
    `\`touch ${canary}\``,
    `a; touch ${canary}`,
    `a && touch ${canary}`,
    `a | touch ${canary}`,
    `'; touch ${canary}; '`,
    `"; touch ${canary}; "`,
    `a\ntouch ${canary}`,
    `\${IFS}touch\${IFS}${canary}`,
    `> ${canary}`,
  ];

  it.each(hostile)('a group named %j is refused by the name rule (nothing runs while planning)', (name) => {
    rmSync(canary, { force: true });
    const error = refusal(yaml('type: task', 'groups:', `  - name: ${JSON.stringify(name)}`, '    commands: [x]'));
    expect(error.path).toBe('groups[0].name');
    expect(existsSync(canary)).toBe(false);
  });

  it('env values with metacharacters are kept byte for byte in the plan, nothing runs while planning', () => {
    rmSync(canary, { force: true });
    const entries = hostile.map((value, i) => [`V${i}`, value] as const);
    const text = yaml('type: task', 'commands: [x]', 'env:', ...entries.map(([k, v]) => `  ${k}: ${JSON.stringify(v)}`), '  - FROM_SHELL');
    const result = loadPlan(text.replace('  - FROM_SHELL\n', ''), FILE, { environ: {} });
    expect(result.env).toEqual(Object.fromEntries(entries));
    const listText = yaml('type: task', 'commands: [x]', 'env:', ...entries.map(([k, v]) => `  - ${JSON.stringify(`${k}=${v}`)}`), '  - FROM_SHELL');
    const fromShell = hostile.join('\n');
    expect(loadPlan(listText, FILE, { environ: { FROM_SHELL: fromShell } }).env).toEqual({ ...Object.fromEntries(entries), FROM_SHELL: fromShell });
    expect(existsSync(canary)).toBe(false);
  });

  it.each(['$(id)', 'A;B', 'A B', 'A=B', '-A', 'A`B`'])('an env variable named %j is refused', (name) => {
    const error = refusal(yaml('type: task', 'commands: [x]', 'env:', `  ${JSON.stringify(name)}: x`));
    expect(error.path.startsWith('env')).toBe(true);
  });

  it('a run name (-n) with metacharacters is refused', () => {
    for (const name of ['$(id)', 'a;b', 'a b', '../etc']) {
      expect(() => loadPlan('type: task\ncommands: [x]\n', FILE, { environ: {}, runName: name })).toThrow(ConfigError);
    }
  });
});
