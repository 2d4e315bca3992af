import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ClientChannel } from 'ssh2';
import { afterEach, describe, expect, it } from 'vitest';
import { JobWatch } from '../../src/backends/ssh/job-watch';
import type { SshSession } from '../../src/backends/ssh/session';

/**
 * The job watcher's word on readiness (job-watch.ts), with its real bash watcher run on this
 * machine through a stand-in for the SSH session: what a readiness loop says goes into the
 * watchers' FIFOs (ready-loop.ts), as on a host.
 */

const children: ChildProcess[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A session whose long-lived channel is a local bash: enough of ClientChannel for JobWatch. */
function localSession(): SshSession {
  const session = {
    onLost: () => undefined,
    openLongLived: (command: string): Promise<ClientChannel> => {
      const child = spawn('bash', ['--noprofile', '--norc', '-c', command], { stdio: ['pipe', 'pipe', 'pipe'] });
      children.push(child);
      const channel = Object.assign(new EventEmitter(), {
        stderr: child.stderr,
        write: (data: string) => child.stdin.write(data),
        end: () => child.stdin.end(),
        close: () => child.kill('SIGKILL'),
      });
      child.stdout.on('data', (chunk: Buffer) => channel.emit('data', chunk));
      child.once('close', () => channel.emit('close'));
      return Promise.resolve(channel as unknown as ClientChannel);
    },
  };
  return session as unknown as SshSession;
}

/** What a job's readiness loop does once its probe passed: `ready <dir>` into every watcher's FIFO. */
function sayReady(watchers: string, dir: string): void {
  for (const fifo of readdirSync(watchers).filter((f) => f.endsWith('.fifo'))) writeFileSync(join(watchers, fifo), `ready ${dir}\n`, { flag: 'r+' });
}

const until = async (check: () => boolean) => {
  const deadline = Date.now() + 5_000;
  while (!check() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  return check();
};

describe('the SSH job watcher and readiness', () => {
  it('does not vouch for a pending readiness read before it listened (a `ready` said in between is not lost)', async () => {
    const watchers = join(mkdtempSync(join(tmpdir(), 'troupe-unit-watch-')), '.watchers');
    dirs.push(watchers.slice(0, -'/.watchers'.length));
    const watch = new JobWatch(watchers, () => Promise.resolve(localSession()), 5_000);
    const dir = '/jobs/run/0/job-0-0';
    // The first read on the host: pending; no watcher listens yet. The job turns ready before the
    // watcher's FIFO exists, so no FIFO hears it.
    const since = watch.begin(dir);
    await watch.watchReadiness(dir, since);
    watch.end(dir);
    // BUG (fixed): the watcher vouched "pending" for good, and the job never became READY.
    expect(watch.readinessPending(dir)).toBe(false);

    // Read again with the watcher listening: now it vouches, until the job's `ready` comes.
    const again = watch.begin(dir);
    await watch.watchReadiness(dir, again);
    watch.end(dir);
    expect(watch.readinessPending(dir)).toBe(true);
    sayReady(watchers, dir);
    expect(await until(() => !watch.readinessPending(dir))).toBe(true);
    watch.close();
  });
});
