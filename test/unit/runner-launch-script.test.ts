import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { renderEnvFile } from '../../src/runner/env-file';
import { renderLaunchScript } from '../../src/runner/launch-script';

const scratch = mkdtempSync(join(tmpdir(), 'troupe-runner-test-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

let counter = 0;
function freshDir(): string {
  counter += 1;
  const dir = join(scratch, `case-${counter}`);
  spawnSync('mkdir', ['-p', dir]);
  return dir;
}

/** Runs the launch script in a real bash, in a fresh directory. */
function runScript(commands: string[], workingDir: string | null = null, image: string | null = null) {
  const dir = freshDir();
  writeFileSync(join(dir, 'launch.sh'), renderLaunchScript({ commands, workingDir, image }));
  // stdin from /dev/null: on a socket stdin (a libuv pipe) bash sources ~/.bashrc, as if run by sshd.
  const r = spawnSync('bash', ['launch.sh'], {
    cwd: dir,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH },
  });
  return { dir, stdout: r.stdout, stderr: r.stderr, code: r.status };
}

/** Sources the env file in a real bash (as the job wrapper does) and returns what a process then sees. */
function envSeenByProcess(env: Record<string, string>): Record<string, string> {
  const dir = freshDir();
  writeFileSync(join(dir, 'job.env'), renderEnvFile(env));
  const dump = `process.stdout.write(JSON.stringify(process.env))`;
  const r = spawnSync('bash', ['-c', '. ./job.env && exec "$NODE" -e "$DUMP"'], {
    cwd: dir,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH, NODE: process.execPath, DUMP: dump },
  });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  return JSON.parse(r.stdout) as Record<string, string>;
}

describe('renderLaunchScript in a real bash', () => {
  it('stops at the first failing command and exits with its code', () => {
    const r = runScript(['echo one', 'exit 7', 'echo three']);
    expect(r.stdout).toBe('one\n');
    expect(r.code).toBe(7);
    expect(runScript(['echo one', 'false', 'echo three']).code).toBe(1);
  });

  it('runs every command in one bash: cd and variables carry over', () => {
    const r = runScript(['cd /', 'X="a b"', 'echo "$PWD:$X"']);
    expect(r.stdout).toBe('/:a b\n');
    expect(r.code).toBe(0);
  });

  it('keeps a multi-line command as written, like dstack (a failing inner line does not stop it)', () => {
    const r = runScript(['false\necho after-false\n', 'echo next']);
    expect(r.stdout).toBe('after-false\nnext\n');
    expect(r.code).toBe(0);
  });

  it('does not let a trailing comment, a comment-only command or `&` swallow the next command', () => {
    expect(runScript(['echo a # a comment', '# only a comment', 'echo b']).stdout).toBe('a\nb\n');
    const bg = runScript(['sleep 0.2 & echo started', 'echo next', 'wait']);
    expect(bg.stdout).toBe('started\nnext\n');
    expect(bg.code).toBe(0);
  });

  it('runs here-docs and line continuations', () => {
    const r = runScript(['cat <<EOF\nhello $((1 + 1))\nEOF', 'echo a \\\n  b']);
    expect(r.stdout).toBe('hello 2\na b\n');
  });

  it('creates and enters the working directory, whatever its name', () => {
    const r = runScript(['pwd', 'touch here'], "dir with 'quotes' and $(spaces)");
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(join(r.dir, "dir with 'quotes' and $(spaces)"));
    expect(existsSync(join(r.dir, "dir with 'quotes' and $(spaces)", 'here'))).toBe(true);
  });

  it('succeeds with no commands and never executes the image name', () => {
    expect(runScript([]).code).toBe(0);
    const r = runScript(['echo ok'], null, 'img\ntouch PWNED');
    expect(r.stdout).toBe('ok\n');
    expect(existsSync(join(r.dir, 'PWNED'))).toBe(false);
  });
});

describe('renderEnvFile through a real bash', () => {
  it('passes hostile values unchanged and executes none of them', () => {
    const dir = freshDir();
    const hostile: Record<string, string> = {
      QUOTES: `it's "double" and 'single' '\\'' ''`,
      DOLLAR: '$HOME ${PATH} $((1+1)) $(touch PWNED1) `touch PWNED2`',
      SEMICOLON: `; touch ${join(dir, 'PWNED3')}; echo`,
      NEWLINES: 'line1\nline2\n\nexport INJECTED=1\n',
      BACKSLASH: 'a\\b\\\\c\\n\\',
      EMPTY: '',
      SPACES: '  leading and trailing  ',
      GLOB: '* ? [a-z] ~ !! ^',
      CONTROL: '\t\r\x1b[31m\x7f',
      UNICODE: 'naïve — 日本語 🎭',
      EQUALS: 'a=b=c',
      DASH: '-n',
      DSTACK_NODES_IPS: '10.0.0.1\n10.0.0.2',
    };
    const seen = envSeenByProcess(hostile);
    for (const [name, value] of Object.entries(hostile)) expect(seen[name], name).toBe(value);
    expect(seen.INJECTED).toBeUndefined();
    for (const f of ['PWNED1', 'PWNED2', 'PWNED3']) expect(existsSync(join(dir, f))).toBe(false);
  });

  it('round-trips arbitrary strings', () => {
    const values = [
      ...fc.sample(fc.string({ unit: 'binary-ascii', maxLength: 40 }), 150),
      ...fc.sample(fc.string({ unit: 'grapheme', maxLength: 20 }), 150),
    ].filter((v) => !v.includes('\0'));
    const env = Object.fromEntries(values.map((v, i) => [`V${i}`, v]));
    const seen = envSeenByProcess(env);
    for (const [name, value] of Object.entries(env)) expect(seen[name], name).toBe(value);
  });

  it('refuses names a shell cannot export and NUL bytes', () => {
    expect(() => renderEnvFile({ 'BAD-NAME': 'x' })).toThrow('"BAD-NAME" is not a valid variable name');
    expect(() => renderEnvFile({ '1X': 'x' })).toThrow('not a valid variable name');
    expect(() => renderEnvFile({ 'A;touch x': 'x' })).toThrow('not a valid variable name');
    expect(() => renderEnvFile({ A: 'x\0y' })).toThrow('NUL');
  });
});
