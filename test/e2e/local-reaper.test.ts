import { execFile, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalInstanceRecordSchema } from '../../src/backends/local/instance-store';
import { lookupUser, runUserName } from '../../src/backends/local/run-user';
import { TroupeClient } from '../../src/client';
import { JobLayout } from '../../src/runner/job-layout';
import { filesNamedNow, readNow } from '../helpers/live-dir';
import { testClient, temporalAddress, uniqueTaskQueue } from '../helpers/temporal';
import { startWorkerProcess } from '../helpers/worker-process-control';
import { alive, waitFor } from './local-fixtures';

/**
 * Issue 29, finding 4: a run terminated in Temporal (`temporal workflow terminate`, the Web UI's
 * Terminate) never reaches its teardown. The worker's reaper finds what the run left on the local
 * fleet and tears it down as a run's end does: within a minute, no job process, no env file, no
 * run user, no lease or instance record, no namespace. A run beside it that is still open keeps
 * everything.
 */

const root = process.getuid?.() === 0;
const scratch = mkdtempSync(join(tmpdir(), 'troupe-reaper-'));
const stateDir = join(scratch, 'fleet');
const taskQueue = uniqueTaskQueue('reaper');
const tag = randomBytes(4).toString('hex');
let worker: ChildProcess | null = null;
let output = '';
let client: Client;
let closeClient: () => Promise<void>;
let troupe: TroupeClient;

beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
  troupe = new TroupeClient(client, { taskQueue, address: temporalAddress() });
  worker = await startWorkerProcess({ taskQueue, localStateDir: stateDir, env: { TEST_REAPER_INTERVAL_MS: '3000' } });
  worker.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
});
afterAll(async () => {
  if (worker && worker.exitCode === null) worker.kill('SIGKILL');
  await closeClient?.();
  rmSync(scratch, { recursive: true, force: true });
});

const LONG = ['type: task', 'nodes: 2', 'env:', `  - SECRET_TOKEN=token-${tag}`, 'commands:', '  - while true; do sleep 0.2; done', ''];

const cli = fileURLToPath(new URL('../../bin/troupe.js', import.meta.url));

function troupeCli(args: string[]): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [cli, ...args], { env: { ...process.env, TEMPORAL_ADDRESS: temporalAddress(), TROUPE_TASK_QUEUE: taskQueue, NO_COLOR: '1' } }, (_err, stdout, stderr) =>
      resolve({ stdout, stderr }),
    );
  });
}

function records(): Array<ReturnType<typeof LocalInstanceRecordSchema.parse>> {
  // The reaper removes records while we read them: a record gone by its read is skipped.
  return readNow(join(stateDir, 'instances'), (n) => n.endsWith('.json')).map(({ text }) => LocalInstanceRecordSchema.parse(JSON.parse(text)));
}

describe('the reaper (local fleet)', () => {
  it('tears down a run terminated in Temporal within a minute, and leaves an open run alone', async () => {
    const doomed = await troupe.submit({ yaml: [`name: doomed-${tag}`, ...LONG].join('\n') });
    const kept = await troupe.submit({ yaml: [`name: kept-${tag}`, ...LONG].join('\n') });
    try {
      const [doomedState, keptState] = await Promise.all(
        [doomed, kept].map((run) => waitFor('the run to run', async () => {
          const state = await run.state();
          return state.status === 'RUNNING' && state.jobs.every((j) => j.pid !== null) && state;
        }, 60_000)),
      );
      const mine = (uid: string) => records().filter((r) => r.run_id === uid);
      const doomedRecords = mine(doomedState!.run_uid);
      expect(doomedRecords).toHaveLength(2);
      const doomedPids = doomedState!.jobs.map((j) => j.pid!);
      const doomedDirs = doomedRecords.map((r) => r.job_dir);
      for (const dir of doomedDirs) expect(existsSync(join(dir, JobLayout.env))).toBe(true);
      const user = runUserName(doomedState!.run_uid, 0);
      if (root) expect(await lookupUser(user)).not.toBeNull();
      const namespaces = doomedRecords.flatMap((r) => (r.netns ? [r.netns] : []));
      const leases = doomedRecords.map((r) => join(stateDir, 'leases', r.ip));
      for (const lease of leases) expect(existsSync(lease)).toBe(true);

      // Terminated in Temporal: the workflow never gets to its teardown.
      const started = Date.now();
      await client.workflow.getHandle(doomed.workflowId).terminate('test: terminated from outside Troupe');
      expect((await doomed.describe()).status.name).toBe('TERMINATED');

      await waitFor('the reaper to tear the terminated run down', async () => {
        for (const pid of doomedPids) if (await alive(pid)) return false;
        if (doomedDirs.some((dir) => existsSync(join(dir, JobLayout.env)))) return false;
        if (root && (await lookupUser(user)) !== null) return false;
        if (mine(doomedState!.run_uid).length > 0) return false;
        if (leases.some((lease) => existsSync(lease))) return false;
        return namespaces.every((ns) => !existsSync(`/run/netns/${ns}`));
      }, 60_000);
      const tookMs = Date.now() - started;
      expect(tookMs).toBeLessThan(60_000);
      const line = new RegExp(`reaper: run run/doomed-${tag} \\(submission 0\\) had closed \\(TERMINATED\\) without its teardown; released 2 nodes on the local fleet`);
      await waitFor("the reaper's line in the worker's output", async () => line.test(output), 10_000);
      // What a run's end keeps: the logs.
      for (const dir of doomedDirs) expect(readdirSync(dir).sort()).toEqual([JobLayout.exitCode, JobLayout.log, JobLayout.started]);

      // `troupe stop` on it says why the run did not tear itself down, and who did.
      const stop = await troupeCli(['stop', `doomed-${tag}`, '-y']);
      expect(stop.stderr).toContain(`Run doomed-${tag} has already ended: TERMINATED.`);
      expect(stop.stderr).toMatch(/Its workflow was terminated in Temporal, not stopped through Troupe, so it did not tear itself down: every worker's reaper stops its jobs and releases its nodes, users and files within a minute of its end \(it closed \d+s ago\)\./);

      // The open run keeps its jobs, files, user and records.
      expect(mine(keptState!.run_uid)).toHaveLength(2);
      for (const job of keptState!.jobs) expect(await alive(job.pid!)).toBe(true);
      if (root) expect(await lookupUser(runUserName(keptState!.run_uid, 0))).not.toBeNull();
      expect((await kept.state()).status).toBe('RUNNING');
      await kept.stop();
      expect((await kept.wait()).status).toBe('TERMINATED');
      console.log(`reaper: terminated run torn down in ${tookMs} ms`);
    } finally {
      // A failed check must not leave the open run's jobs behind for the next test.
      await kept.stop().catch(() => undefined);
    }
  }, 180_000);
});
