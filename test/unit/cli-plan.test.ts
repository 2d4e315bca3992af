import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { loadPlan, planToJson } from '../../src/plan';

/** `troupe plan` as a user runs it: the real bin script, a child process, its exit code and streams. */

const root = fileURLToPath(new URL('../..', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'troupe-cli-plan-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function troupe(args: string[], env: Record<string, string> = {}) {
  const base = { ...process.env };
  delete base.HF_TOKEN;
  const result = spawnSync(process.execPath, ['bin/troupe.js', ...args], {
    cwd: root,
    env: { ...base, NO_COLOR: '1', ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

function writeConfig(name: string, text: string): string {
  const path = join(scratch, name);
  writeFileSync(path, text);
  return path;
}

describe('troupe plan --json', () => {
  it('prints the plan of the seed sample: router 0, prefill 1, decode 2', () => {
    const { code, stdout, stderr } = troupe(['plan', '-f', 'examples/pd-disagg.yml', '--json'], { HF_TOKEN: 'hf' });
    expect(stderr).toBe('');
    expect(code).toBe(0);
    const json = JSON.parse(stdout);
    const expected = planToJson(
      loadPlan(readFileSync(join(root, 'examples/pd-disagg.yml'), 'utf8'), 'examples/pd-disagg.yml', { environ: { HF_TOKEN: 'hf' } }),
    );
    expect(json).toEqual(expected);
    expect(json.jobs.map((j: { job_num: number; node_group_name: string }) => [j.job_num, j.node_group_name])).toEqual([
      [0, 'router'],
      [1, 'prefill'],
      [2, 'decode'],
    ]);
  });

  it('warns, and still plans, when a bare env KEY is not set in the shell', () => {
    const { code, stdout, stderr } = troupe(['plan', '-f', 'examples/pd-disagg.yml', '--json']);
    expect(code).toBe(0);
    expect(JSON.parse(stdout).nodes_num).toBe(3);
    expect(stderr).toBe(
      'warning: examples/pd-disagg.yml:9:5: env[0]: environment variable HF_TOKEN is not set in this shell: export it, or write HF_TOKEN=<value>\n',
    );
  });

  it('takes the run name from -n', () => {
    const file = writeConfig('named.yml', 'type: task\nname: from-file\ncommands: [a]\n');
    const { code, stdout } = troupe(['plan', '-f', file, '--json', '-n', 'from-cli']);
    expect(code).toBe(0);
    expect(JSON.parse(stdout).jobs[0].job_name).toBe('from-cli-0-0');
  });
});

describe('troupe plan (table)', () => {
  it('shows the run, a row per group with its ranks and resources, and a row per job', () => {
    const { code, stdout } = troupe(['plan', '-f', 'examples/pd-disagg.yml'], { HF_TOKEN: 'hf' });
    expect(code).toBe(0);
    const lines = stdout.split('\n');
    expect(lines[0]).toMatch(/^ Run\s+pd-disagg$/);
    expect(stdout).toMatch(/ Nodes\s+3 in 3 groups/);
    expect(stdout).toMatch(/ Startup order\s+workers-first/);
    expect(lines.find((l) => / router /.test(l) && /cpu=/.test(l))).toMatch(/^\s+router\s+1\s+0\s+cpu=4 mem=8GB\.\. disk=100GB\.\./);
    expect(lines.find((l) => /^\s+prefill\s+1\s+1\s/.test(l))).toMatch(/gpu=L40S:1\.\./);
    expect(lines.find((l) => /pd-disagg-0-0/.test(l))).toMatch(/^\s+0\s+pd-disagg-0-0\s+router\s+0\s+global master$/);
    expect(lines.find((l) => /pd-disagg-2-0/.test(l))).toMatch(/^\s+2\s+pd-disagg-2-0\s+decode\s+0\s+group master$/);
    expect(stdout).not.toContain('\x1b[');
  });
});

describe('troupe plan refusals', () => {
  it('prints the one-line refusal of an invalid config and exits 1, without a stack trace', () => {
    const file = writeConfig('bad.yml', 'type: task\ngroups:\n  - name: Router\n    commands: [a]\n');
    const { code, stdout, stderr } = troupe(['plan', '-f', file]);
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toBe(
      `${file}:3:11: groups[0].name: a group name must match ^[a-z0-9][a-z0-9-]{0,39}$ (lowercase letters, digits and -, at most 40 characters)\n`,
    );
  });

  it('prints YAML syntax errors the same way', () => {
    const file = writeConfig('syntax.yml', 'type: task\ncommands: [a\n');
    const { code, stderr } = troupe(['plan', '-f', file, '--json']);
    expect(code).toBe(1);
    expect(stderr).toMatch(new RegExp(`^${file.replaceAll('.', '\\.')}:\\d+:\\d+: \\(yaml\\): YAML syntax error: [^\\n]+\\n$`));
  });

  it('refuses an out-of-range address reference at its position', () => {
    const file = writeConfig('ref.yml', 'type: task\ngroups:\n  - commands:\n      - curl ${{ groups[3].nodes[0].IP_ADDRESS }}\n');
    const { code, stderr } = troupe(['plan', '-f', file]);
    expect(code).toBe(1);
    expect(stderr).toBe(`${file}:4:14: groups[0].commands[0]: reference groups[3].nodes[0].IP_ADDRESS is out of range: the task has 1 group(s), 0..0\n`);
  });

  it('exits 2 on bad usage', () => {
    const noFile = troupe(['plan']);
    expect(noFile.code).toBe(2);
    expect(noFile.stderr).toMatch(/^troupe plan needs a task config: -f FILE\n\nusage: troupe plan/);
    const badFlag = troupe(['plan', '-f', 'examples/pd-disagg.yml', '--yes']);
    expect(badFlag.code).toBe(2);
    expect(badFlag.stderr).toMatch(/^Unknown option '--yes'/);
    const missing = troupe(['plan', '-f', join(scratch, 'nope.yml')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^cannot read .*nope\.yml: ENOENT/);
  });

  it('prints its help with -h', () => {
    const { code, stdout } = troupe(['plan', '-h']);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^usage: troupe plan -f task\.yml \[--json\]/);
  });
});
