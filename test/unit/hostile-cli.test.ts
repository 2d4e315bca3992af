import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * Hostile files through `troupe plan -f FILE` as a user runs it: raw bytes that are not UTF-8,
 * other encodings, control bytes, binary noise. The CLI prints the plan (exit 0) or ONE line on
 * stderr (exit 1): never a stack trace, never a Node warning, never a silently altered value.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'troupe-hostile-cli-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

let files = 0;
function writeBytes(bytes: Buffer): string {
  const path = join(scratch, `config-${++files}.yml`);
  writeFileSync(path, bytes);
  return path;
}

function troupePlan(file: string, json = true) {
  const started = performance.now();
  const result = spawnSync(process.execPath, ['bin/troupe.js', 'plan', '-f', file, ...(json ? ['--json'] : [])], {
    cwd: root,
    env: { ...process.env, NO_COLOR: '1' },
    encoding: 'utf8',
    timeout: 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr, ms: performance.now() - started };
}

/** Exit 1 and exactly one line on stderr: `file:line:col: path: reason`. */
function expectOneLineRefusal(run: ReturnType<typeof troupePlan>, file: string) {
  expect(run.stdout).toBe('');
  expect(run.code).toBe(1);
  const lines = run.stderr.split('\n').filter((l) => l !== '');
  expect(lines, run.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:\\d+:\\d+: [^\\n]+: [^\\n]+$`));
  return lines[0] ?? '';
}

const utf8 = (text: string) => Buffer.from(text, 'utf8');

describe('troupe plan -f on bytes that are not clean UTF-8 YAML', () => {
  it('invalid UTF-8 in an env value is refused at its line and column, not replaced by U+FFFD', () => {
    // Line 5 is `  - A=` then 0xFF 0xFE (never valid in UTF-8) and Latin-1 `café`.
    const file = writeBytes(Buffer.concat([utf8('type: task\nname: bytes\ncommands: [x]\nenv:\n  - A='), Buffer.from([0xff, 0xfe]), utf8(' caf'), Buffer.from([0xe9, 0x0a])]));
    const line = expectOneLineRefusal(troupePlan(file), file);
    expect(line.startsWith(`${file}:5:7: `)).toBe(true);
    expect(line).toMatch(/UTF-8/);
  });

  // Open: refused as not UTF-8, but the column counts differently than this test expects.
  it.fails('a Latin-1 byte in a command is refused the same way', () => {
    const file = writeBytes(Buffer.concat([utf8('type: task\ncommands:\n  - echo caf'), Buffer.from([0xe9]), utf8('\n')]));
    const line = expectOneLineRefusal(troupePlan(file), file);
    expect(line.startsWith(`${file}:3:15: `)).toBe(true);
    expect(line).toMatch(/UTF-8/);
  });

  it('a UTF-16 file (with its byte order mark) is refused with a message that names the encoding', () => {
    const file = writeBytes(Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('type: task\ncommands: [x]\n', 'utf16le')]));
    const line = expectOneLineRefusal(troupePlan(file), file);
    expect(line).toMatch(/UTF-16|UTF-8/);
  });

  it('a UTF-8 byte order mark is accepted', () => {
    const file = writeBytes(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), utf8('type: task\nname: with-bom\ncommands: [x]\n')]));
    const run = troupePlan(file);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout).run_name).toBe('with-bom');
  });

  it('CRLF line endings plan like LF ones', () => {
    const file = writeBytes(utf8('type: task\r\nname: crlf\r\ncommands:\r\n  - echo a\r\n  - echo b\r\n'));
    const run = troupePlan(file);
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout).jobs[0].commands).toEqual(['echo a', 'echo b']);
  });

  it('a raw NUL byte in the file is refused in one line', () => {
    const file = writeBytes(Buffer.concat([utf8('type: task\ncommands: [x]\nenv:\n  - A=a'), Buffer.from([0x00]), utf8('b\n')]));
    expectOneLineRefusal(troupePlan(file), file);
  });

  it('a raw escape sequence in a value does not reach the terminal through the refusal', () => {
    const file = writeBytes(utf8('type: task\ncommands: [x]\nnodes: "\x1b[2J\x1b[31mboom"\n'));
    const line = expectOneLineRefusal(troupePlan(file), file);
    expect(line).not.toContain('\x1b');
  });

  it('raw ESC and BEL in a run name, in -n and in a command name come back escaped, never raw', () => {
    const file = writeBytes(utf8('type: task\nname: "bad\\e]0;PWNED\\aname"\ncommands: [x]\n'));
    const line = expectOneLineRefusal(troupePlan(file), file);
    expect(line).toContain('bad\\x1b]0;PWNED\\x07name');
    const ok = writeBytes(utf8('type: task\ncommands: [x]\n'));
    const flag = spawnSync(process.execPath, ['bin/troupe.js', 'plan', '-f', ok, '-n', 'x\x1b[31mred'], { cwd: root, encoding: 'utf8' });
    expect(flag.status).toBe(1);
    expect(flag.stderr).not.toMatch(/[\x07\x1b]/);
    expect(flag.stderr).toContain('x\\x1b[31mred');
    const command = spawnSync(process.execPath, ['bin/troupe.js', 'pl\x07an'], { cwd: root, encoding: 'utf8' });
    expect(command.status).toBe(2);
    expect(command.stderr.split('\n')[0]).toBe('troupe: unknown command "pl\\x07an"');
  });

  it('`troupe logs` and `troupe stop` with a group workflow id say what a run name looks like, before connecting (exit 2)', () => {
    for (const args of [['logs'], ['stop', '-y']]) {
      const run = spawnSync(process.execPath, ['bin/troupe.js', ...args, 'run/pd/group/router'], {
        cwd: root,
        env: { ...process.env, TEMPORAL_ADDRESS: '127.0.0.1:9' },
        encoding: 'utf8',
      });
      expect(run.status).toBe(2);
      expect(run.stderr.trim()).toBe(
        '"run/pd/group/router" is not a run name: a run name is lowercase letters, digits and -, starting with a letter (^[a-z][a-z0-9-]{1,40}$), as `troupe ps -a` lists them',
      );
    }
  });

  // Reported: the YAML library prints "(node:PID) Warning: Keys with collection values will be stringified…" on stderr.
  it('a mapping key that is itself a mapping is refused in one line, without a Node warning', () => {
    const file = writeBytes(utf8('type: task\ncommands: [x]\n? {a: 1}\n: 1\n'));
    expectOneLineRefusal(troupePlan(file), file);
  });

  it('binary noise is refused in one line, fast', () => {
    // A fixed pseudo-random sequence, so a failure is reproducible.
    let seed = 0x2545f491;
    const bytes = Buffer.alloc(4096);
    for (let i = 0; i < bytes.length; i++) {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      bytes[i] = seed & 0xff;
    }
    const file = writeBytes(bytes);
    const run = troupePlan(file);
    expectOneLineRefusal(run, file);
    expect(run.ms).toBeLessThan(15_000);
  });

  it('a 10 MB env value through the CLI: a plan or one line, within 30 s', () => {
    const file = writeBytes(utf8(`type: task\nname: big-value\ncommands: [x]\nenv:\n  A: ${'v'.repeat(10 * 1024 * 1024)}\n`));
    const run = troupePlan(file);
    expect(run.ms).toBeLessThan(30_000);
    if (run.code === 0) expect(JSON.parse(run.stdout).run_name).toBe('big-value');
    else expectOneLineRefusal(run, file);
  });

  it('a billion-laughs file through the CLI is refused in one line, fast', () => {
    const levels = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'];
    const lines = ['type: task', 'commands: [x]', 'lol:', '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
    for (let k = 1; k < levels.length; k++) lines.push(`  ${levels[k]}: &${levels[k]} [${Array(9).fill(`*${levels[k - 1]}`).join(', ')}]`);
    const file = writeBytes(utf8(`${lines.join('\n')}\n`));
    const run = troupePlan(file);
    expectOneLineRefusal(run, file);
    expect(run.ms).toBeLessThan(15_000);
  });
});

describe('troupe plan -f on inputs past the bounds', () => {
  it('/dev/zero is refused at once in one line, as not a regular file', () => {
    const run = troupePlan('/dev/zero');
    expect(run.ms).toBeLessThan(10_000);
    expectOneLineRefusal(run, '/dev/zero');
    expect(run.stderr).toMatch(/not a regular file \(a character device\)/);
  });

  it("a 1.2 MB command is refused at plan in one line, with the run's input size and Temporal's limit", () => {
    const file = writeBytes(utf8(`type: task\ncommands:\n  - echo ${'a'.repeat(1_200_000)}\n`));
    const line = expectOneLineRefusal(troupePlan(file), file);
    expect(line).toMatch(/\(plan\): the run's input is 2\.\d MB; Temporal accepts at most 2 MB/);
  });
});
