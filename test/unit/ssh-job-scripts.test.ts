import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkBaseDir, containerName, jobDirectory, pathSegment } from '../../src/backends/ssh/job-paths';
import {
  cleanupRunScript,
  frameUploads,
  jobStateScript,
  prepareStartScript,
  renderContainerLaunchScript,
  resultOf,
  spawnWrapperScript,
  startJobScript,
  stopJobScript,
} from '../../src/backends/ssh/job-scripts';
import { quoteShellWord } from '../../src/runner/shell-quote';
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
    expect(execFileSync('bash', ['-c', `printf %s ${quoteShellWord(value)}`], { encoding: 'utf8' })).toBe(value);
  });

  it('refuses NUL', () => {
    expect(() => quoteShellWord('a\0b')).toThrow(/NUL/);
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
    ['container launch', renderContainerLaunchScript({ jobDir: dir, image: "img'x:1", runtime: 'podman', containerName: 'troupe-0', limits: { memory_bytes: 1024, cpus: 0.5, pids: 64 }, shmBytes: 2048 })],
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

describe('the start in one round trip', () => {
  // A wrapper that claims the job and records its pid, as the real one does first.
  const wrapper = 'mkdir started || exit 0\necho "$$ 1" > started/pid.tmp && mv started/pid.tmp started/pid\n';
  const files = (env: string) =>
    frameUploads([
      { name: 'job.env', mode: 0o600, content: Buffer.from(env, 'utf8') },
      { name: 'hostfile', mode: 0o644, content: Buffer.from('10.0.0.1 slots=8\n') },
      { name: 'wrapper.sh', mode: 0o755, content: Buffer.from(wrapper) },
      { name: 'ssh/session.sh', mode: 0o700, content: Buffer.from('#!/bin/sh\n') },
      { name: 'ssh/bin/ssh', mode: 0o700, content: Buffer.from('') },
    ]);
  const modeOf = (path: string) => (statSync(path).mode & 0o777).toString(8);

  it('writes every file with its mode and content, then starts the wrapper', () => {
    const base = mkdtempSync(join(tmpdir(), 'troupe-unit-start-'));
    try {
      const jobDir = `${base}/run/0/job`;
      const env = "A='ünï\\n cødé'\n\nB=2\n";
      const out = execFileSync('bash', ['--noprofile', '--norc', '-c', startJobScript(jobDir, 'inst-1', 'n1')], { input: files(env), encoding: 'utf8' });
      expect(resultOf(out)?.[0]).toBe('started');
      expect(readFileSync(`${jobDir}/job.env`, 'utf8')).toBe(env);
      expect([modeOf(jobDir), modeOf(`${jobDir}/job.env`), modeOf(`${jobDir}/hostfile`), modeOf(`${jobDir}/wrapper.sh`), modeOf(`${jobDir}/ssh/bin/ssh`)]).toEqual(['700', '600', '644', '755', '700']);
      expect(readdirSync(`${base}/run/0`)).toEqual(['job']);
    } finally {
      rmSync(base, { recursive: true, force: true });
    }
  });

  it('replaces the files one by one where an unclaimed job directory exists, and refuses a short upload', () => {
    const base = mkdtempSync(join(tmpdir(), 'troupe-unit-start-'));
    try {
      const jobDir = `${base}/run/0/job`;
      mkdirSync(`${jobDir}/ssh`, { recursive: true });
      writeFileSync(`${jobDir}/job.env`, 'OLD=1\n');
      const out = execFileSync('bash', ['--noprofile', '--norc', '-c', startJobScript(jobDir, 'inst-1', 'n2')], { input: files('NEW=1\n'), encoding: 'utf8' });
      expect(resultOf(out)?.[0]).toBe('started');
      expect(readFileSync(`${jobDir}/job.env`, 'utf8')).toBe('NEW=1\n');
      expect(readdirSync(`${base}/run/0`)).toEqual(['job']);
      const short = Buffer.concat([Buffer.from('job.env 600 10\n'), Buffer.from('abc')]);
      expect(() => execFileSync('bash', ['--noprofile', '--norc', '-c', startJobScript(`${base}/run/0/other`, 'inst-2', 'n3')], { input: short, stdio: 'pipe' })).toThrow(/short upload/);
    } finally {
      rmSync(base, { recursive: true, force: true });
    }
  });
});
