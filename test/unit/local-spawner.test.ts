import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { spawner } from '../../src/backends/local/spawner';

/**
 * The local fleet starts its processes from a helper process (src/backends/local/spawner.ts):
 * real processes here. Until the helper answers, and after it is gone, processes start directly.
 */
const dir = mkdtempSync(join(tmpdir(), 'troupe-spawner-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Who started a command: the pid of its parent. */
async function parentOfCommand(): Promise<number> {
  const r = await spawner.run('sh', ['-c', 'echo $PPID']);
  return Number(r.stdout.trim());
}

/** The helper's pid, once processes come from it (the first request only starts it). */
async function helperPid(): Promise<number> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const parent = await parentOfCommand();
    if (parent !== process.pid) return parent;
    if (Date.now() > deadline) throw new Error('the spawn helper never answered');
    await sleep(20);
  }
}

/** Field 6 of /proc/PID/stat: the session id. */
function sessionOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[3]);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('the local fleet’s process starter', () => {
  it('runs commands from the helper, not from this process, with exit code and output', async () => {
    const helper = await helperPid();
    expect(helper).not.toBe(process.pid);
    const r = await spawner.run('sh', ['-c', 'echo out; echo err >&2; exit 3']);
    expect(r).toEqual({ code: 3, stdout: 'out\n', stderr: 'err\n' });
    const missing = await spawner.run('/nonexistent/troupe-command', []);
    expect(missing.code).not.toBe(0);
  });

  it('starts a detached process in its own session, output appended to its log, and tells its exit code', async () => {
    await helperPid();
    const log = join(dir, 'detached.log');
    const pidFile = join(dir, 'detached.pid');
    const started = spawner.startDetached('sh', ['-c', `echo $$ > ${pidFile}; echo hello $GREETING; sleep 0.2; exit 7`], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', GREETING: 'there' },
      log,
    });
    let pid = 0;
    for (let i = 0; i < 200 && !pid; i++) {
      await sleep(10);
      try {
        pid = Number(readFileSync(pidFile, 'utf8').trim());
      } catch {
        // not written yet
      }
    }
    expect(pid).toBeGreaterThan(0);
    expect(sessionOf(pid)).toBe(pid);
    expect(await started.exited).toBe(7);
    expect(readFileSync(log, 'utf8')).toBe('hello there\n');
  });

  it('reports a detached start that fails', async () => {
    await helperPid();
    const started = spawner.startDetached('/nonexistent/troupe-wrapper', [], { cwd: dir, env: {}, log: join(dir, 'failed.log') });
    expect(await started.exited).toBe(-1);
  });

  it('outlives the loss of its helper: a command in flight is run again here, and a new helper takes over', async () => {
    const first = await helperPid();
    const marker = join(dir, 'runs');
    const inFlight = spawner.run('sh', ['-c', `echo x >> ${marker}; sleep 0.3; echo done`]);
    await sleep(100);
    process.kill(first, 'SIGKILL');
    const r = await inFlight;
    expect(r).toMatchObject({ code: 0, stdout: 'done\n' });
    // Once from the lost helper (its command outlives it), once again from this process.
    expect(readFileSync(marker, 'utf8')).toBe('x\nx\n');
    const second = await helperPid();
    expect(second).not.toBe(first);
    expect(alive(first)).toBe(false);
  });
});
