import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseReadiness, PROBE_FILE, READINESS_FILE, READY_LOOP_FILE, renderReadyLoop } from '../../src/backends/ssh/ready-loop';

/** The host-side readiness loop run by a real bash in a job directory of a temporary folder (on SSH hosts: test/e2e/ssh-runner.test.ts). */

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function jobDir(probe: string, budget_ms: number): { dir: string; watchers: string; run: () => Promise<number | null> } {
  const base = mkdtempSync(join(tmpdir(), 'troupe-unit-ready-'));
  dirs.push(base);
  const dir = join(base, 'job');
  const watchers = join(base, '.watchers');
  mkdirSync(dir);
  mkdirSync(watchers);
  writeFileSync(join(dir, 'job.env'), "export GREETING='hi there'\n");
  writeFileSync(join(dir, PROBE_FILE), probe);
  writeFileSync(join(dir, READY_LOOP_FILE), renderReadyLoop({ script: probe, interval_s: 0.1, budget_ms }, watchers));
  const run = () =>
    new Promise<number | null>((resolve) => {
      const child = spawn('bash', ['--noprofile', '--norc', READY_LOOP_FILE, String(process.pid)], { cwd: dir, stdio: 'ignore' });
      child.once('exit', resolve);
    });
  return { dir, watchers, run };
}

describe('readiness loop on the host', () => {
  it('probes with the job env until it passes, records READY, then tells the watchers', async () => {
    const { dir, watchers, run } = jobDir('[ "$GREETING" = "hi there" ] && test -e go', 10_000);
    spawnSync('mkfifo', [join(watchers, '1.fifo')]);
    // The watcher says when it holds the fifo open: a line written to a fifo nobody holds is lost (a
    // watcher that started late on a loaded machine once left this test waiting out its 120 s).
    const fifo = spawn('bash', ['-c', `exec 3<>"$0"; echo open; IFS= read -r line <&3; printf %s "$line"`, join(watchers, '1.fifo')]);
    let told = '';
    let opened: () => void = () => undefined;
    const holding = new Promise<void>((resolve) => (opened = resolve));
    fifo.stdout.on('data', (chunk: Buffer) => {
      told += chunk.toString();
      if (told.startsWith('open\n')) opened();
    });
    const heard = new Promise((resolve) => fifo.once('exit', resolve));
    await holding;
    const ended = run();
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(existsSync(join(dir, READINESS_FILE))).toBe(false);
    writeFileSync(join(dir, 'go'), '');
    expect(await ended).toBe(0);
    expect(parseReadiness(readFileSync(join(dir, READINESS_FILE), 'utf8'))).toEqual({ state: 'ready' });
    await heard;
    expect(told).toBe(`open\nready ${dir}`);
  });

  // The failing probe's budget leaves room for a slow bash on a loaded machine (500 ms timed out its first attempt at load 50).
  it('records the last answer when the time is up, and a timed-out attempt as 124', async () => {
    const failing = jobDir('echo; echo "  http://10.0.0.7:8000/health → HTTP 503  "; exit 1', 3000);
    expect(await failing.run()).toBe(0);
    expect(parseReadiness(readFileSync(join(failing.dir, READINESS_FILE), 'utf8'))).toEqual({
      state: 'not-ready',
      exit_code: 1,
      output: 'http://10.0.0.7:8000/health → HTTP 503',
    });
    const hanging = jobDir('sleep 5', 300);
    expect(await hanging.run()).toBe(0);
    expect(parseReadiness(readFileSync(join(hanging.dir, READINESS_FILE), 'utf8'))).toEqual({ state: 'not-ready', exit_code: 124, output: '' });
  });

  it('stops without an outcome once the job has ended', async () => {
    const { dir, run } = jobDir('exit 1', 60_000);
    writeFileSync(join(dir, 'exit_code'), '0\n');
    expect(await run()).toBe(0);
    expect(existsSync(join(dir, READINESS_FILE))).toBe(false);
  });
});
