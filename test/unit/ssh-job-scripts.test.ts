import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { checkBaseDir, containerName, jobDirectory, pathSegment } from '../../src/backends/ssh/job-paths';
import {
  cleanupRunScript,
  jobStateScript,
  prepareStartScript,
  renderContainerLaunchScript,
  resultOf,
  spawnWrapperScript,
  startJobScript,
  stopJobScript,
} from '../../src/backends/ssh/job-scripts';
import { shQuote } from '../../src/backends/ssh/shell-quote';
import { wholeCharacters } from '../../src/backends/ssh/ssh-runner';

const hostile = [
  `it's "quoted"`,
  '$HOME $(touch /tmp/troupe-unit-pwned) `touch /tmp/troupe-unit-pwned`',
  'line\nbreak\n',
  'back\\slash \\n',
  '; rm -rf / #',
  'ünïcødé',
  '',
];

describe('shell quoting', () => {
  it.each(hostile)('passes %j through bash unchanged', (value) => {
    expect(execFileSync('bash', ['-c', `printf %s ${shQuote(value)}`], { encoding: 'utf8' })).toBe(value);
  });

  it('refuses NUL', () => {
    expect(() => shQuote('a\0b')).toThrow(/NUL/);
  });
});

describe('job paths', () => {
  it('keeps harmless names and makes hostile ones inert and distinct', () => {
    expect(pathSegment('run-1.a_b')).toBe('run-1.a_b');
    const a = pathSegment('../../etc');
    const b = pathSegment("x' $(y) `z`");
    expect(a).toMatch(/^[A-Za-z0-9_][A-Za-z0-9._-]*$/);
    expect(b).toMatch(/^[A-Za-z0-9_][A-Za-z0-9._-]*$/);
    expect(a).not.toContain('/');
    expect(['.', '..']).not.toContain(pathSegment('..'));
    expect(pathSegment('a b')).not.toBe(pathSegment('a_b'));
    expect(jobDirectory('/srv/jobs/', { run_id: 'r', submission: 2, job_name: 'j' })).toBe('/srv/jobs/r/2/j');
    expect(containerName('/srv/jobs/r/2/j')).toMatch(/^troupe-[0-9a-f]{16}$/);
  });

  it('wants an absolute base directory without ".."', () => {
    expect(() => checkBaseDir('.troupe/jobs')).toThrow(/must be absolute/);
    expect(() => checkBaseDir('/a/../b')).toThrow(/must not contain/);
  });
});

describe('remote scripts', () => {
  const dir = "/tmp/we'ird $(x) dir";
  const id = "inst'1 `y`";
  it.each([
    ['prepare', prepareStartScript(dir, true)],
    ['spawn', spawnWrapperScript(dir, id)],
    ['state', jobStateScript(dir)],
    ['stop', stopJobScript(dir, id, 5)],
    ['cleanup', cleanupRunScript(dir)],
    ['start in one round trip', startJobScript(dir, id, 'abc123')],
    ['container launch', renderContainerLaunchScript({ jobDir: dir, image: "img'x:1", runtime: 'podman', containerName: 'troupe-0' })],
  ])('%s is valid bash with hostile names', (_name, script) => {
    expect(() => execFileSync('bash', ['-n'], { input: script })).not.toThrow();
  });

  it('reads the result line', () => {
    expect(resultOf('noise\nresult started 42\nmore')).toEqual(['started', '42']);
    expect(resultOf('nothing')).toBeNull();
  });
});

describe('log chunks', () => {
  it('never end inside a UTF-8 character', () => {
    const text = Buffer.from('aé€😀', 'utf8'); // 1 + 2 + 3 + 4 bytes
    expect(wholeCharacters(text.subarray(0, 2))).toBe(1);
    expect(wholeCharacters(text.subarray(0, 3))).toBe(3);
    expect(wholeCharacters(text.subarray(0, 5))).toBe(3);
    expect(wholeCharacters(text.subarray(0, 9))).toBe(6);
    expect(wholeCharacters(text)).toBe(10);
    expect(wholeCharacters(Buffer.from([0xe2, 0x82]))).toBe(2);
  });
});
