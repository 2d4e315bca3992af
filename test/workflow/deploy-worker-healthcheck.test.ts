import { spawn } from 'node:child_process';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { DEFAULT_MAX_POLL_AGE_MS, kindsNotPolled } from '../../deploy/worker-healthcheck';
import { projectRoot } from '../../src/devserver/dev-server';
import { workerIdentity } from '../../src/backends/backend-names';
import { startWorker, temporalAddress, testClient, uniqueTaskQueue } from '../helpers/temporal';

/**
 * The compose worker's health check, run as Docker runs it (a process; exit 0 or 1) against the
 * test dev server, with a real worker polling — or not — on a fresh task queue.
 */

const workflowsPath = fileURLToPath(new URL('../workflow/smoke-workflows.ts', import.meta.url));
const activities = { greet: async (name: string) => `hello ${name}` };

function runHealthcheck(taskQueue: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join('deploy', 'worker-healthcheck.ts')], {
      cwd: projectRoot,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', TEMPORAL_ADDRESS: temporalAddress(), TROUPE_TASK_QUEUE: taskQueue },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.once('exit', (code) => resolve({ code, output }));
  });
}

/** The server lists a poller once its first poll arrives: wait for that, within a bound. */
async function healthyWithin(taskQueue: string, ms: number) {
  const deadline = Date.now() + ms;
  for (;;) {
    const r = await runHealthcheck(taskQueue);
    if (r.code === 0 || Date.now() > deadline) return r;
    await new Promise((res) => setTimeout(res, 500));
  }
}

describe('deploy/worker-healthcheck.ts', () => {
  it('is unhealthy when no worker polls the task queue', async () => {
    const r = await runHealthcheck(uniqueTaskQueue('health-none'));
    expect(r.code).toBe(1);
    expect(r.output).toMatch(/^unhealthy: no workflow or activity poll from a worker on /);
  });

  it("is healthy while this machine's worker polls, and not once it has stopped long enough", async () => {
    const taskQueue = uniqueTaskQueue('health-up');
    // The identity a Troupe worker gives itself: the SDK's `<pid>@<host>` and the backends it drives.
    const { stop } = await startWorker({ taskQueue, workflowsPath, activities, identity: workerIdentity(`${process.pid}@${hostname()}`, ['ssh']) });
    try {
      const r = await healthyWithin(taskQueue, 15_000);
      expect(r.output).toContain(`healthy: the worker on ${hostname()} polls`);
      expect(r.code).toBe(0);
    } finally {
      await stop();
    }
    // The server keeps a stopped worker listed for minutes; the age limit is what turns it unhealthy.
    const { client, close } = await testClient();
    try {
      const check = { namespace: 'default', taskQueue, host: hostname(), maxPollAgeMs: DEFAULT_MAX_POLL_AGE_MS };
      expect(await kindsNotPolled(client, { ...check, now: Date.now() })).toEqual([]);
      expect(await kindsNotPolled(client, { ...check, now: Date.now() + DEFAULT_MAX_POLL_AGE_MS + 60_000 })).toEqual(['workflow', 'activity']);
    } finally {
      await close();
    }
  });

  it("is unhealthy when only another machine's worker polls", async () => {
    const taskQueue = uniqueTaskQueue('health-other');
    const { stop } = await startWorker({ taskQueue, workflowsPath, activities, identity: '1@another-machine' });
    try {
      const { client, close } = await testClient();
      try {
        // Wait until the server lists that worker, so the check below is about identity, not timing.
        const deadline = Date.now() + 15_000;
        let missing = await kindsNotPolled(client, { namespace: 'default', taskQueue, host: 'another-machine', maxPollAgeMs: DEFAULT_MAX_POLL_AGE_MS, now: Date.now() });
        while (missing.length > 0 && Date.now() < deadline) {
          await new Promise((res) => setTimeout(res, 500));
          missing = await kindsNotPolled(client, { namespace: 'default', taskQueue, host: 'another-machine', maxPollAgeMs: DEFAULT_MAX_POLL_AGE_MS, now: Date.now() });
        }
        expect(missing).toEqual([]);
      } finally {
        await close();
      }
      const r = await runHealthcheck(taskQueue);
      expect(r.code).toBe(1);
      expect(r.output).toContain(`no workflow or activity poll from a worker on ${hostname()}`);
    } finally {
      await stop();
    }
  });

  it('is unhealthy when the service cannot be reached', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', join('deploy', 'worker-healthcheck.ts')], {
      cwd: projectRoot,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', TEMPORAL_ADDRESS: '127.0.0.1:1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    const code = await new Promise((r) => child.once('exit', r));
    expect(code).toBe(1);
    expect(output).toMatch(/^unhealthy: cannot reach the Temporal service at 127\.0\.0\.1:1/);
  });
});
