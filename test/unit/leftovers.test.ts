import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { leftovers } from '../helpers/leftovers';
import { instance, job, pdRun } from './cli-render-fixtures';

/** The e2e tests' leak check must see every machine of a run, a node's earlier attempts included. */

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

/** A process marked as one of a machine's, as every process of a local or SSH job is. */
async function marked(instanceId: string): Promise<ChildProcess> {
  const child = spawn('sleep', ['60'], { env: { ...process.env, TROUPE_INSTANCE_ID: instanceId }, stdio: 'ignore' });
  children.push(child);
  await new Promise((r) => child.once('spawn', r));
  return child;
}

describe('leftovers', () => {
  it("counts a process left by a node's earlier attempt (a replaced machine), not only its current one's", async () => {
    const fleetDir = mkdtempSync(join(tmpdir(), 'troupe-leftovers-'));
    try {
      const old = { ...instance('10.0.0.9'), instance_id: `i-old-${randomBytes(4).toString('hex')}` };
      const attempt = { attempt: 0, instance: old, status: 'TERMINATED', termination_reason: null, message: null, exit_code: null, running_at: null, finished_at: null };
      const state = pdRun({}, [job(0, 0, 'router', 0, { instance: instance('10.0.0.10'), attempt: 1, previous_attempts: [attempt] })]);
      expect(leftovers(state, fleetDir).processes).toBe(0);
      const child = await marked(old.instance_id);
      expect(leftovers(state, fleetDir).processes).toBe(1);
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
      expect(leftovers(state, fleetDir).processes).toBe(0);
    } finally {
      rmSync(fleetDir, { recursive: true, force: true });
    }
  });
});
