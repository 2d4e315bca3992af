import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { escapeControlChars, escapeOutput, guardStream, writeRaw } from '../../src/cli/render/control-chars';
import { renderPsTable } from '../../src/cli/render/run-table';
import { paint } from '../../src/cli/render/style';
import type { RunSummary } from '../../src/client';
import { instance, job, pdRun, t0 } from './cli-render-fixtures';

/**
 * Control characters (ESC, BEL, C1) and bidi controls (U+202A–U+202E, U+2066–U+2069) from any
 * source — a flag, a config, a run's state written by any Temporal client — never reach the
 * terminal raw: arguments are checked, and every output path goes through one gate.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'troupe-control-chars-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
// eslint-disable-next-line no-control-regex
const RAW = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/u;

function troupe(args: string[]) {
  const run = spawnSync(process.execPath, ['bin/troupe.js', ...args], {
    cwd: root,
    env: { ...process.env, NO_COLOR: '1', TEMPORAL_ADDRESS: '127.0.0.1:9' },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

describe('the escaping function', () => {
  it('escapes C0, DEL, C1 and bidi controls, keeps newline and tab', () => {
    expect(escapeControlChars('a\x1b]0;x\x07b\u202ec\u2066d\x9be\tf\ng')).toBe('a\\x1b]0;x\\x07b\\u202ec\\u2066d\\u009be\tf\ng');
  });

  it('output keeps the colors the CLI paints, and nothing else that moves the terminal', () => {
    const own = paint({ color: true }, 'red', 'FAILED');
    expect(escapeOutput(`${own} \x1b[8mhidden\x1b[2J\x1b[5A`)).toBe(`${own} \\x1b[8mhidden\\x1b[2J\\x1b[5A`);
  });

  it('JSON output stays JSON', () => {
    const text = JSON.stringify({ backend: 'x\u202e\x7f\x1b[31m' });
    expect(JSON.parse(escapeOutput(text))).toEqual({ backend: 'x\u202e\x7f\x1b[31m' });
    expect(escapeOutput(text)).not.toMatch(RAW);
  });

  it('a guarded stream escapes every string written to it; writeRaw passes the gate', () => {
    const written: string[] = [];
    const stream = { write: (text: string) => written.push(text) };
    guardStream(stream);
    stream.write('evil\x1b]0;PWNED\x07\u202e');
    writeRaw(stream, '\x1b[3A\x1b[0J');
    expect(written).toEqual(['evil\\x1b]0;PWNED\\x07\\u202e', '\x1b[3A\x1b[0J']);
  });

  it('`troupe ps` of a run whose state a stranger wrote (host, reason, fleet) prints nothing raw through the gate', () => {
    const state = pdRun({ status: 'FAILED', message: 'boom\x1b[2J\u202e' }, [
      job(0, 0, 'router', 0, { status: 'FAILED', message: 'exit\x1b]0;PWNED\x07', instance: instance('127.0.0.2') }),
    ]);
    const summary: RunSummary = {
      name: 'pd', workflowId: 'run/pd', runId: 'r1', open: false, status: 'FAILED', backend: 'lo\x1b[31mcal',
      groups: [{ name: 'router', nodes: 1 }], fleet: 'fl\u202eeet', startTime: t0, closeTime: t0, state, stateError: null,
    };
    const written: string[] = [];
    const stream = { write: (text: string) => written.push(text) };
    guardStream(stream);
    stream.write(`${renderPsTable([summary], { color: true }, new Date(Date.parse(t0) + 5_000)).join('\n')}\n`);
    const out = written.join('');
    // Only the CLI's own colors remain: strip them, and nothing raw is left.
    // eslint-disable-next-line no-control-regex
    expect(out.replace(/\x1b\[(?:0|1|2|31|32|33|34|36|90)m/g, '')).not.toMatch(RAW);
  });
});

describe('arguments', () => {
  it('`apply --backend` with an escape sequence is refused in one escaped line (exit 2), before connecting', () => {
    const run = troupe(['apply', '-f', 'examples/pd-disagg-local.yml', '-y', '--backend', 'lo\x1b]0;PWNED\x07cal']);
    expect(run.code).toBe(2);
    expect(run.stderr).not.toMatch(RAW);
    expect(run.stderr.trim()).toBe(
      '--backend: "lo\\u001b]0;PWNED\\u0007cal" is not a backend name: lowercase letters, digits and -, starting with a letter (^[a-z][a-z0-9-]{0,31}$), e.g. local or ssh',
    );
  });

  it('`apply --fleet` and connection flags with control or bidi characters are refused (exit 2)', () => {
    const fleet = troupe(['apply', '-f', 'examples/pd-disagg-local.yml', '-y', '--fleet', 'gpu\u202e']);
    expect(fleet.code).toBe(2);
    expect(fleet.stderr).toMatch(/^--fleet: /);
    expect(fleet.stderr).not.toMatch(RAW);
    const ps = troupe(['ps', '--namespace', 'default\u202e\x1b[2J']);
    expect(ps.code).toBe(2);
    expect(ps.stderr).toContain('--namespace: "default\\\\u202e\\\\x1b[2J" holds control or bidi characters');
    expect(ps.stderr).not.toMatch(RAW);
  });

  it('a refusal quoting U+202E (right-to-left override) from a config shows it escaped', () => {
    const file = join(scratch, 'rtl.yml');
    writeFileSync(file, 'type: task\nname: "evil\u202egnp.exe"\ncommands: [x]\n');
    const run = troupe(['plan', '-f', file]);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('evil\\u202egnp.exe');
    expect(run.stderr).not.toMatch(RAW);
  });
});
