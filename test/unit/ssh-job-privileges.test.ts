import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { canConfine, CONFINE_PERL, confineArgv, noNewPrivsLine, type Confinement } from '../../src/backends/no-new-privs';
import { parsePrivilegesProbe, privilegesProbeScript } from '../../src/backends/ssh/job-privileges-script';
import { frameUploads, resultOf, spawnWrapperScript, startJobScript } from '../../src/backends/ssh/job-scripts';

/**
 * Issue 37 part 2 on SSH hosts, the script-building part: the per-connection probe (which
 * architecture, perl, whether the kernel takes the filter), what the worker makes of its answer,
 * and the start script that runs the wrapper under the walls or logs why not. Run here with bash
 * for real where this machine can. (Through real SSH hosts: test/e2e/ssh-privileges.test.ts.)
 */

const base = mkdtempSync(join(tmpdir(), 'troupe-unit-ssh-privs-'));
afterAll(() => rmSync(base, { recursive: true, force: true }));
const here = canConfine(process.arch) && existsSync(CONFINE_PERL);

const bash = (script: string, options: { input?: Buffer; env?: NodeJS.ProcessEnv } = {}) =>
  execFileSync('bash', ['--noprofile', '--norc', '-c', script], { encoding: 'utf8', ...options });

describe("what the worker makes of the host's answer", () => {
  it("builds the filter for the host's architecture, not the worker's", () => {
    expect(parsePrivilegesProbe('walls ok x86_64\n', 'h')).toEqual({ walls: confineArgv('x64') });
    expect(parsePrivilegesProbe('result cgroups 0\nwalls ok aarch64\n', 'h')).toEqual({ walls: confineArgv('arm64') });
    expect(confineArgv('x64')).not.toEqual(confineArgv('arm64'));
  });

  it.each<[string, string, string]>([
    ['no table for its architecture', 'walls none riscv64', 'no seccomp filter for riscv64 on root@h:22'],
    ['perl missing', 'walls no-perl x86_64', `${CONFINE_PERL} is missing on root@h:22`],
    ['a kernel without seccomp filters', 'walls failed x86_64 troupe: cannot forbid new privileges: Invalid argument', 'troupe: cannot forbid new privileges: Invalid argument on root@h:22'],
    ['no answer', 'result cgroups 0', 'root@h:22 did not say whether it can forbid new privileges'],
  ])('none, and why, where the host cannot apply them: %s', (_case, stdout, why) => {
    expect(parsePrivilegesProbe(stdout, 'root@h:22')).toEqual({ walls: null, why });
  });
});

describe('the probe, run by bash', () => {
  it.runIf(here)('says this machine can apply them (the install tried on /bin/true)', () => {
    const machine = bash('uname -m').trim();
    expect(bash(privilegesProbeScript())).toBe(`walls ok ${machine}\n`);
  });

  it('says an architecture without a table has none', () => {
    const bin = join(base, 'fake-uname');
    mkdirSync(bin);
    writeFileSync(join(bin, 'uname'), '#!/bin/sh\necho riscv64\n');
    chmodSync(join(bin, 'uname'), 0o755);
    const out = bash(privilegesProbeScript(), { env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? ''}` } });
    expect(out).toBe('walls none riscv64\n');
    expect(parsePrivilegesProbe(out, 'h')).toEqual({ walls: null, why: 'no seccomp filter for riscv64 on h' });
  });
});

describe('the start script', () => {
  // A wrapper that records what it runs under, then claims the job as the real one does first.
  const wrapper = [
    "sed -n 's/^NoNewPrivs:[[:space:]]*//p' /proc/self/status > nnp",
    'unshare -Ur true 2>/dev/null; echo $? > userns',
    'mkdir started || exit 0',
    'echo "$$ 1" > started/pid.tmp && mv started/pid.tmp started/pid',
  ].join('\n');
  const files = frameUploads([{ name: 'wrapper.sh', mode: 0o755, content: Buffer.from(`${wrapper}\n`) }]);
  let n = 0;
  const start = (confinement: Confinement) => {
    n += 1;
    const jobDir = join(base, 'run', String(n), 'job');
    const out = bash(startJobScript(jobDir, `inst-${n}`, `n${n}`, { confinement }), { input: files });
    const read = (name: string) => (existsSync(join(jobDir, name)) ? readFileSync(join(jobDir, name), 'utf8') : '');
    return { result: resultOf(out)?.[0], nnp: read('nnp').trim(), userns: read('userns').trim(), log: read('log') };
  };

  it.runIf(here)("runs the wrapper under no_new_privs and the filter: it cannot unshare -Ur; the log says nothing", () => {
    expect(start({ walls: confineArgv(process.arch) })).toEqual({ result: 'started', nnp: '1', userns: '1', log: '' });
  });

  it("runs the wrapper without them where the host cannot apply them, and the job's log says why in one line", () => {
    const why = 'no seccomp filter for riscv64 on root@h:22';
    const { result, log } = start({ walls: null, why });
    expect(result).toBe('started');
    expect(log).toBe(noNewPrivsLine(why));
  });

  it('is valid bash with hostile names, walls or none; a job in an image gets neither walls nor a line about them', () => {
    const dir = "/tmp/we'ird $(x) dir";
    for (const confinement of [{ walls: confineArgv('arm64') }, { walls: null, why: "it's `x` $(y)" }]) {
      expect(() => execFileSync('bash', ['-n'], { input: spawnWrapperScript(dir, "inst'1", { confinement }) })).not.toThrow();
    }
    const image = spawnWrapperScript(dir, 'i', { cgroup: { kind: 'none', why: 'in an image' } });
    expect(image).not.toContain(CONFINE_PERL);
    expect(image).not.toContain('no_new_privs');
  });
});
