import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runWorkflowId } from '../../src/contract/ids';
import type { RunState } from '../../src/contract/run-state';
import { makeLocalFleet } from '../helpers/local-fleet';
import { temporalAddress } from '../helpers/temporal';
import { useLocalTroupe } from '../helpers/local-troupe';

/** The local PD examples, run as a user runs them: `troupe apply -f ... -y` against a worker. */

const root = fileURLToPath(new URL('../..', import.meta.url));
const fleet = makeLocalFleet('troupe-examples-');
const env = useLocalTroupe(fleet);

function apply(file: string, name: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['bin/troupe.js', 'apply', '-f', file, '-y', '--name', name], {
    cwd: root,
    env: { ...process.env, TEMPORAL_ADDRESS: temporalAddress(), TROUPE_TASK_QUEUE: env.worker.taskQueue },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code: code ?? 1, stdout, stderr })));
}

async function finalState(name: string): Promise<RunState> {
  return (await env.client.workflow.getHandle(runWorkflowId(name)).result()) as RunState;
}

describe('local PD examples', () => {
  it('pd-disagg-local.yml: the router starts once both workers are ready; its only request goes through', async () => {
    const name = `pd-ready-${env.worker.taskQueue.slice(-8)}`;
    const { code, stdout, stderr } = await apply('examples/pd-disagg-local.yml', name);
    expect(code, stderr).toBe(0);
    expect(stdout).toContain('router: prefill prefill/0 -> decode decode/0: Hello, world');
    const state = await finalState(name);
    expect(state.status).toBe('DONE');
    const [router, prefill, decode] = state.jobs;
    for (const w of [prefill, decode]) expect(Date.parse(router!.running_at!)).toBeGreaterThanOrEqual(Date.parse(w!.ready_at!));
    // Interpolated addresses are the workers' own.
    expect(stdout).toContain(`prefill=${prefill?.instance?.internal_ip}`);
    expect(stdout).toContain(`decode=${decode?.instance?.internal_ip}`);
  });

  it('pd-disagg-local-workers-first.yml: the seed\'s order, the router after both workers are running', async () => {
    const name = `pd-wf-${env.worker.taskQueue.slice(-8)}`;
    const { code, stdout, stderr } = await apply('examples/pd-disagg-local-workers-first.yml', name);
    expect(code, stderr).toBe(0);
    expect(stdout).toContain('router: prefill prefill/0 -> decode decode/0: Hello, world');
    const state = await finalState(name);
    const [router, ...workers] = state.jobs;
    for (const w of workers) expect(Date.parse(router!.running_at!)).toBeGreaterThanOrEqual(Date.parse(w.running_at!));
  });
});
