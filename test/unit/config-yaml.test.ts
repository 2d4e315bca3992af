import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors';
import { formatFieldPath } from '../../src/config/field-path';
import { ConfigSource } from '../../src/config/yaml-source';
import { thrownBy } from '../helpers/refusal';

/** Runs `fn`, which must throw a ConfigError, and returns it. */
function refusal(fn: () => unknown): ConfigError {
  return thrownBy(fn, ConfigError);
}

const text = [
  'type: task', // 1
  'groups:', // 2
  '  - name: router', // 3
  '    commands:', // 4
  '      - echo hi', // 5
  '  - name: prefill', // 6
  '    resources:', // 7
  '      gpu: L40S', // 8
  '    nodes:', // 9
  '',
].join('\n');

describe('ConfigSource positions', () => {
  const source = ConfigSource.parse(text, 'task.yml');

  it('gives the 1-based line:col of a nested value', () => {
    expect(source.position(['groups', 1, 'resources', 'gpu'])).toEqual({ line: 8, col: 12 });
    expect(source.position(['groups', 0, 'commands', 0])).toEqual({ line: 5, col: 9 });
    expect(source.position(['type'])).toEqual({ line: 1, col: 7 });
  });

  it('gives the key of a mapping entry when asked for the key', () => {
    expect(source.position(['groups', 1, 'resources', 'gpu'], 'key')).toEqual({ line: 8, col: 7 });
    expect(source.position(['groups'], 'key')).toEqual({ line: 2, col: 1 });
  });

  it('falls back to the nearest parent that exists', () => {
    expect(source.position(['groups', 1, 'resources', 'cpu'])).toEqual({ line: 8, col: 7 });
    expect(source.position(['groups', 7, 'name'])).toEqual({ line: 3, col: 3 });
    expect(source.position(['nodes'])).toEqual({ line: 1, col: 1 });
  });

  it('points at the key of an entry with no value', () => {
    expect(source.position(['groups', 1, 'nodes'])).toEqual({ line: 9, col: 5 });
  });

  it('keeps the data as plain values', () => {
    expect(source.data).toEqual({
      type: 'task',
      groups: [
        { name: 'router', commands: ['echo hi'] },
        { name: 'prefill', resources: { gpu: 'L40S' }, nodes: null },
      ],
    });
  });

  it('builds one-line errors with file, position and field path', () => {
    const error = source.error(['groups', 1, 'resources', 'gpu'], 'bad gpu');
    expect(error.message).toBe('task.yml:8:12: groups[1].resources.gpu: bad gpu');
    expect(source.error(['groups', 0], 'x', { label: 'groups[0, 2]' }).message).toBe('task.yml:3:5: groups[0, 2]: x');
  });
});

describe('positions inside strings', () => {
  it('finds a character in a plain, a quoted and a literal block scalar', () => {
    const yaml = [
      'commands:',
      '  - echo ${{ x }}',
      "  - 'say ${{ y }}'",
      '  - |',
      '    first line',
      '',
      '      indented ${{ z }}',
      '',
    ].join('\n');
    const source = ConfigSource.parse(yaml, 'f.yml');
    expect(source.positionInString(['commands', 0], 5)).toEqual({ line: 2, col: 10 });
    expect(source.positionInString(['commands', 1], 4)).toEqual({ line: 3, col: 10 });
    const block = (source.data.commands as string[])[2] ?? '';
    expect(source.positionInString(['commands', 2], block.indexOf('${{'))).toEqual({ line: 7, col: 16 });
  });

  it('falls back to the start of the scalar when the text has escapes', () => {
    const source = ConfigSource.parse('commands:\n  - "a\\tb ${{ x }}"\n', 'f.yml');
    const command = (source.data.commands as string[])[0] ?? '';
    expect(source.positionInString(['commands', 0], command.indexOf('${{'))).toEqual({ line: 2, col: 5 });
  });
});

describe('ConfigSource refusals', () => {
  it('reports a YAML syntax error at its position', () => {
    const error = refusal(() => ConfigSource.parse('type: task\ncommands: [a, b\nnodes: 2\n', 'bad.yml'));
    expect(error.file).toBe('bad.yml');
    expect(error.message).toMatch(/^bad\.yml:3:1: \(yaml\): YAML syntax error: /);
    expect(error.message).not.toContain('\n');
  });

  it('refuses a duplicate key, naming it', () => {
    const error = refusal(() => ConfigSource.parse('type: task\ncommands: [a]\ncommands: [b]\n', 'dup.yml'));
    expect(error.message).toBe('dup.yml:3:1: commands: `commands` appears twice in this mapping: keep one');
    expect(error.path).toBe('commands');
    expect(error.line).toBe(3);
  });

  it('refuses a duplicate key in a nested mapping', () => {
    const error = refusal(() => ConfigSource.parse('resources:\n  gpu: A100\n  gpu: H100\n', 'dup.yml'));
    expect(error.message).toBe('dup.yml:3:3: resources.gpu: `gpu` appears twice in this mapping: keep one');
  });

  it('refuses aliases that expand past the bound', () => {
    const lines = ['a0: &a0 [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 1; i < 8; i++) lines.push(`a${i}: &a${i} [${Array(10).fill(`*a${i - 1}`).join(', ')}]`);
    const error = refusal(() => ConfigSource.parse(`${lines.join('\n')}\n`, 'bomb.yml'));
    expect(error.message).toMatch(/^bomb\.yml:\d+:\d+: a\d: with its aliases expanded the document is larger than 4 MiB/);
  });

  it('allows a few small aliases', () => {
    const source = ConfigSource.parse('base: &cmds [echo a]\ncommands: *cmds\n', 'ok.yml');
    expect(source.data.commands).toEqual(['echo a']);
  });

  it('refuses a document that is not a mapping', () => {
    expect(refusal(() => ConfigSource.parse('- a\n- b\n', 'list.yml')).message).toBe(
      'list.yml:1:1: (document): expected a mapping (`key: value` lines) at the top level, got a list',
    );
    expect(refusal(() => ConfigSource.parse('just text\n', 's.yml')).message).toMatch(/^s\.yml:1:1: \(document\): .*got a string/);
    expect(refusal(() => ConfigSource.parse('', 'empty.yml')).message).toBe(
      'empty.yml:1:1: (document): the file is empty: expected a mapping with `type:`',
    );
  });

  it('refuses more than one document', () => {
    const error = refusal(() => ConfigSource.parse('type: task\n---\ntype: fleet\n', 'two.yml'));
    expect(error.message).toMatch(/^two\.yml:2:1: .*more than one YAML document/);
  });
});

describe('YAML dialect', () => {
  it('reads booleans and numbers as dstack (PyYAML, YAML 1.1) does', () => {
    const source = ConfigSource.parse(
      ['a: yes', 'b: off', 'c: On', 'd: y', 'e: n', 'f: 1e3', 'g: 1.5e+3', 'h: 0755', 'i: 1_000', 'j: 1:30', 'k: true'].join('\n'),
      'd.yml',
    );
    expect(source.data).toEqual({ a: true, b: false, c: true, d: 'y', e: 'n', f: '1e3', g: 1500, h: 493, i: 1000, j: 90, k: true });
  });
});

describe('formatFieldPath', () => {
  it('writes keys with dots and indexes in brackets', () => {
    expect(formatFieldPath(['groups', 1, 'resources', 'gpu'])).toBe('groups[1].resources.gpu');
    expect(formatFieldPath(['env', 0])).toBe('env[0]');
    expect(formatFieldPath([])).toBe('(document)');
  });
});

describe('ConfigError', () => {
  it('is one line: file:line:col: path: reason', () => {
    const error = new ConfigError('a.yml', 3, 7, 'groups[0].nodes', 'must be at least 1,\n  got 0');
    expect(error.message).toBe('a.yml:3:7: groups[0].nodes: must be at least 1, got 0');
    expect(error).toMatchObject({ file: 'a.yml', line: 3, col: 7, path: 'groups[0].nodes', name: 'ConfigError' });
    expect(error).toBeInstanceOf(Error);
  });
});
