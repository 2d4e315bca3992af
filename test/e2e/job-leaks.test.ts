import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeClient } from '../../src/client';
import { JOB_PATH } from '../../src/backends/local/local-backend';
import { startWorkerProcess, useWorkerProcesses } from '../helpers/worker-process-control';

/**
 * What a job must not get from the worker that starts it: file descriptors other than 0-2 (the
 * worker here is started holding two more, as a worker started by another program may), root's
 * PATH, and a `bash` found through a PATH the task sets.
 */

const env = useWorkerProcesses('job-leaks');
let worker: ChildProcess;
let troupe: TroupeClient;

beforeAll(async () => {
  worker = await startWorkerProcess({ taskQueue: env.taskQueue, localStateDir: env.fleet.stateDir, extraFds: 2 });
  env.workers.push(worker);
  troupe = new TroupeClient(env.client, { taskQueue: env.taskQueue });
});
afterAll(() => {
  worker?.kill('SIGTERM');
});

const S = () => env.shared.dir;

describe('a job starts with nothing of the worker but what it is given', () => {
  it('gets fds 0-2 only, and a PATH of its own, not the worker’s', async () => {
    const yaml = [
      'type: task',
      `name: leaks-${env.taskQueue.slice(-8)}`,
      'commands:',
      // Listed once the child is `sleep` and asleep: before its exec it is a copy of the shell, with the shell's
      // own fds, and the kernel names it `sleep` before it closes the close-on-exec ones (seen once under load).
      `  - sleep 30 & p=$!; until [ "$(cat /proc/$p/comm)" = sleep ] && grep -q '^State:.*(sleeping)' /proc/$p/status; do :; done; ls /proc/$p/fd | tr '\\n' ' ' > ${S()}/fds; kill $p`,
      `  - printf %s "$PATH" > ${S()}/path`,
      '',
    ].join('\n');
    const state = await (await troupe.submit({ yaml, options: { stop_grace_s: 1 } })).wait();
    expect(state.status, state.message ?? '').toBe('DONE');
    expect(env.shared.lines('fds')).toEqual(['0 1 2 ']);
    expect(env.shared.lines('path')).toEqual([JOB_PATH]);
  });

  it('runs /bin/bash even when the task’s PATH puts another bash first', async () => {
    const evil = join(S(), 'evil');
    mkdirSync(evil);
    writeFileSync(join(evil, 'bash'), `#!/bin/sh\ntouch ${S()}/evil-bash-ran\nexec /bin/bash "$@"\n`);
    chmodSync(evil, 0o755);
    chmodSync(join(evil, 'bash'), 0o755);
    const yaml = [
      'type: task',
      `name: evil-path-${env.taskQueue.slice(-8)}`,
      'env:',
      `  - PATH=${evil}:/usr/bin:/bin`,
      'commands:',
      `  - readlink /proc/$$/exe > ${S()}/shell`,
      '',
    ].join('\n');
    const state = await (await troupe.submit({ yaml, options: { stop_grace_s: 1 } })).wait();
    expect(state.status, state.message ?? '').toBe('DONE');
    expect(existsSync(join(S(), 'evil-bash-ran'))).toBe(false);
    expect(env.shared.lines('shell')[0]).toMatch(/^\/(usr\/)?bin\/bash$/);
  });
});
