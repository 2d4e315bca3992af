import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { spawner } from '../../src/backends/local/spawner';
import { watchLocalJobEnds } from '../../src/backends/local/job-ends';
import { readProcStat } from '../../src/backends/local/proc';

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

  it('pushes the end of a process it started (its child) and of one it did not (pidfd), and tells a reused pid apart', async () => {
    await helperPid();
    const pidFile = join(dir, 'watched-child.pid');
    const child = spawner.startDetached('sh', ['-c', `echo $$ > ${pidFile}; exec sleep 30`], { cwd: dir, env: { PATH: '/usr/bin:/bin' }, log: join(dir, 'watched.log') });
    const childPid = await pidFrom(pidFile);
    const stranger = spawn('sleep', ['30'], { detached: true, stdio: 'ignore' });
    stranger.unref();
    const strangerPid = stranger.pid ?? 0;
    const ofChild = spawner.watchEnd(childPid, await starttimeOf(childPid));
    const ofStranger = spawner.watchEnd(strangerPid, await starttimeOf(strangerPid));
    // The same pid with another start time: another process, so the one watched is gone.
    const reused = spawner.watchEnd(strangerPid, (await starttimeOf(strangerPid)) - 1);
    expect(await reused.ended).toBe('ended');
    const unresolved = Symbol('still watching');
    expect(await Promise.race([ofChild.ended, ofStranger.ended, sleep(300).then(() => unresolved)])).toBe(unresolved);
    process.kill(childPid, 'SIGTERM');
    process.kill(strangerPid, 'SIGTERM');
    expect(await ofChild.ended).toBe('ended');
    expect(await ofStranger.ended).toBe('ended');
    expect(await child.exited).toBe(128);
    // Gone before the watch: ended at once.
    expect(await spawner.watchEnd(strangerPid, await starttimeOf(childPid).catch(() => 1)).ended).toBe('ended');
  });

  it('names a job when its wrapper ends, across the loss of the helper (the new one watches it by pidfd), and polls what it cannot watch', async () => {
    await helperPid();
    const jobDir = (name: string) => {
      const d = join(dir, name);
      mkdirSync(join(d, 'started'), { recursive: true });
      return d;
    };
    const running = jobDir('job-running');
    const pidFile = join(running, 'started', 'pid');
    // A job wrapper's claim: its pid and start time in started/pid.
    spawner.startDetached('sh', ['-c', `read -r s < /proc/$$/stat; set -- \${s##*) }; echo "$$ \${20}" > ${pidFile}.tmp; mv ${pidFile}.tmp ${pidFile}; exec sleep 30`], {
      cwd: dir,
      env: { PATH: '/usr/bin:/bin' },
      log: join(dir, 'job.log'),
    });
    const pid = await pidFrom(pidFile);
    const stopped = jobDir('job-stopped');
    writeFileSync(join(stopped, 'started', 'stopped'), 'now\n');
    const unclaimed = join(dir, 'job-unclaimed');
    const names: number[] = [];
    const watch = watchLocalJobEnds(
      [
        { job_num: 0, dir: running },
        { job_num: 1, dir: stopped },
        { job_num: 2, dir: unclaimed },
      ],
      100,
      (jobNums) => names.push(...jobNums),
    );
    try {
      await sleep(400);
      expect(names).toContain(1);
      // Not started: named every poll interval.
      expect(names.filter((n) => n === 2).length).toBeGreaterThanOrEqual(2);
      expect(names).not.toContain(0);
      // The helper dies (as with a worker's crash): the job is polled, then watched by the next helper.
      process.kill(await helperPid(), 'SIGKILL');
      await helperPid();
      // Polled (named every 100 ms) until the next try at watching it, a few seconds on.
      let pushed = false;
      for (let i = 0; i < 30 && !pushed; i++) {
        names.length = 0;
        await sleep(300);
        pushed = !names.includes(0);
      }
      expect(pushed).toBe(true);
      process.kill(pid, 'SIGTERM');
      await sleep(300);
      expect(names).toContain(0);
    } finally {
      watch.close();
    }
  });
});

async function pidFrom(file: string): Promise<number> {
  for (let i = 0; i < 300; i++) {
    try {
      const pid = Number(readFileSync(file, 'utf8').trim().split(' ')[0]);
      if (pid > 0) return pid;
    } catch {
      // not written yet
    }
    await sleep(10);
  }
  throw new Error(`no pid in ${file}`);
}

async function starttimeOf(pid: number): Promise<number> {
  const stat = await readProcStat(pid);
  if (!stat) throw new Error(`no process ${pid}`);
  return stat.starttime;
}
