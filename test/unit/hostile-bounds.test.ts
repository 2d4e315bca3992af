import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_CONFIG_BYTES, readConfigBytes } from '../../src/config/config-file';
import { ConfigError } from '../../src/config/errors';
import { loadPlan } from '../../src/plan';
import { cpuTimed } from '../helpers/cpu-time';

/**
 * Every input is bounded before it can cost time or memory: the file's size and kind, the size of
 * the document with its aliases expanded, duplicate keys found in linear time, the plan's size
 * against what Temporal accepts, and the dependency graph's size.
 */

const FILE = 'bounds.yml';
const scratch = mkdtempSync(join(tmpdir(), 'troupe-hostile-bounds-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/**
 * Ceilings are CPU time (see cpuTimed), about ten times what the work costs here, so load cannot
 * trip them; each still fails on the blow-up it guards, named where it is used.
 */
function refusal(text: string, cpuCeilingMs = 3_000): ConfigError {
  const { error, cpuMs } = cpuTimed(() => loadPlan(text, FILE, { environ: {}, runName: 'bounds' }));
  expect(cpuMs, 'CPU time to refuse').toBeLessThan(cpuCeilingMs);
  expect(error).toBeInstanceOf(ConfigError);
  const message = (error as ConfigError).message;
  expect(message).toMatch(/^[^\n]+:\d+:\d+: [^\n]+: [^\n]+$/);
  expect(message.length).toBeLessThanOrEqual(500);
  return error as ConfigError;
}

const yaml = (...lines: string[]) => `${lines.join('\n')}\n`;

describe('the config file itself', () => {
  it('a file larger than 4 MiB is refused before it is read, naming the bound', () => {
    const file = join(scratch, 'big.yml');
    writeFileSync(file, `type: task\ncommands: [x]\n# ${'x'.repeat(MAX_CONFIG_BYTES)}\n`);
    expect(() => readConfigBytes(file)).toThrow(/^.*big\.yml:1:1: \(file\): the file is 4 MiB: a config file is at most 4 MiB$/);
  });

  it('text given directly is bounded the same way', () => {
    const error = refusal(`type: task\ncommands: [x]\n# ${'x'.repeat(MAX_CONFIG_BYTES)}\n`);
    expect(error.reason).toMatch(/at most 4 MiB/);
  });

  it.each([
    ['/dev/zero', /a character device/],
    ['/tmp', /a directory/],
  ])('%s is refused at once as not a regular file', (path, kind) => {
    // No time bound: a read of /dev/zero would never end, and the test's own timeout fails it.
    expect(() => readConfigBytes(path)).toThrow(kind);
  });

  it('a file of exactly the bound is read', () => {
    const file = join(scratch, 'exact.yml');
    writeFileSync(file, Buffer.alloc(MAX_CONFIG_BYTES, 0x61));
    expect(readConfigBytes(file).length).toBe(MAX_CONFIG_BYTES);
  });
});

describe('aliases are bounded by the expanded size, not by their count', () => {
  it('49 aliases of a 100 KB scalar (4.9 MB expanded) are refused at the alias that passes the bound', () => {
    const text = yaml('type: task', `x-big: &big ${'v'.repeat(100_000)}`, 'commands:', ...Array.from({ length: 49 }, () => '  - *big'));
    const error = refusal(text);
    expect(error.reason).toMatch(/with its aliases expanded the document is larger than 4 MiB/);
  });

  it('100 aliases of a short list are fine', () => {
    const text = yaml('type: task', 'x-cmd: &c echo hi', 'commands:', ...Array.from({ length: 100 }, () => '  - *c'));
    const plan = loadPlan(text.replace('x-cmd: &c echo hi\n', '').replace('commands:\n', 'commands:\n  - &c echo hi\n'), FILE, { environ: {} });
    expect(plan.groups[0]?.commands).toHaveLength(101);
  });
});

describe('duplicate keys are found in linear time, in every mapping, with their position', () => {
  it.each([
    ['env', (n: number) => yaml('type: task', 'commands: [x]', 'env:', ...Array.from({ length: n }, (_, i) => `  K${i}: v`))],
    ['resources', (n: number) => yaml('type: task', 'commands: [x]', 'resources:', ...Array.from({ length: n }, (_, i) => `  k${i}: 1`))],
    ['the top level', (n: number) => yaml('type: task', 'commands: [x]', ...Array.from({ length: n }, (_, i) => `x-${i}: 1`))],
  ])('30,000 keys in %s: a plan or a refusal within 5 s of CPU', (_where, text) => {
    // Linear: ~0.4 s here. The quadratic check this guards took ~7 s at 20,000 keys, ~16 s at 30,000.
    const { error, cpuMs } = cpuTimed(() => loadPlan(text(30_000), FILE, { environ: {} }));
    if (error !== undefined) expect(error).toBeInstanceOf(ConfigError);
    expect(cpuMs).toBeLessThan(5_000);
  });

  it('a duplicate among 30,000 keys is refused at the second one', () => {
    const keys = Array.from({ length: 30_000 }, (_, i) => `  K${i}: v`);
    keys.push('  K17: again');
    const error = refusal(yaml('type: task', 'commands: [x]', 'env:', ...keys));
    expect(error.message).toBe(`${FILE}:30004:3: env.K17: \`K17\` appears twice in this mapping: keep one`);
  });
});

describe("the plan's size against what Temporal accepts", () => {
  it('a 1.2 MB command is refused at plan, saying the input size and the limit', () => {
    const error = refusal(yaml('type: task', 'commands:', `  - echo ${'a'.repeat(1_200_000)}`, 'nodes: 2'));
    expect(error.message).toMatch(/^bounds\.yml:1:1: \(plan\): the run's input is \d+\.\d MB; Temporal accepts at most 2 MB per payload/);
  });

  it('secret values count at their sealed size', () => {
    const value = 'a'.repeat(1_300_000);
    expect(() => loadPlan(yaml('type: task', 'commands: [x]', 'env:', `  - NOTE=${value}`), FILE, { environ: {} })).not.toThrow();
    expect(() => loadPlan(yaml('type: task', 'commands: [x]', 'env:', `  - API_TOKEN=${value}`), FILE, { environ: {} })).toThrow(
      /the run's input is 1\.7 MB/,
    );
  });
});

describe('the dependency graph is bounded', () => {
  it('1,500 groups each depending on all earlier ones are refused fast', () => {
    const groups = Array.from({ length: 1_500 }, (_, i) => `  - {name: g${i}, commands: [x], depends_on: [${Array.from({ length: i }, (_, j) => `g${j}`).join(', ')}]}`);
    const text = yaml('type: task', 'groups:', ...groups);
    if (Buffer.byteLength(text) > MAX_CONFIG_BYTES) {
      expect(refusal(text, 10_000).reason).toMatch(/at most 4 MiB/);
    }
    const fewer = yaml('type: task', 'groups:', ...groups.slice(0, 600));
    expect(refusal(fewer, 10_000).reason).toMatch(/depends_on lists 179700 dependencies in all; a task has at most 16384/);
  });

  it('more than 1,024 groups are refused', () => {
    const groups = Array.from({ length: 1_025 }, (_, i) => `  - {name: g${i}, commands: [x]}`);
    expect(refusal(yaml('type: task', 'groups:', ...groups)).reason).toMatch(/at most 1024 groups/);
  });
});
