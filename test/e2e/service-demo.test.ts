import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pidAlive, projectRoot } from '../../src/devserver/dev-server';
import { demoEnv, runDemo } from '../helpers/demo-script';
import { standInCopy } from '../../scripts/demo-service';

/**
 * `npm run demo -- --service` as a user runs it (its script, on ports and state directories of its
 * own here): the PD service of stand-in replicas behind a gateway answers the curl it prints,
 * router → prefill → decode, and when the demo ends — or is interrupted with Ctrl-C — nothing it
 * started is left running.
 */

const scratch = mkdtempSync(join(tmpdir(), 'troupe-service-demo-'));
const standIn = join(projectRoot, 'examples', 'services', 'stand-in-model.py');
let env: NodeJS.ProcessEnv;

/** The pids the demo says it started (dev server, gateway, worker). */
function startedPids(output: string): number[] {
  return [...output.matchAll(/(?:Temporal dev server at \S+ \(pid |started a gateway \(pid |started a worker \(pid )(\d+)/g)].map((m) => Number(m[1]));
}

/** Processes of this test's demo still running: its nodes (under its local state dir) and stand-in servers. */
function leftoverProcesses(): string[] {
  const ps = spawnSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
  return ps.stdout.split('\n').filter((line) => line.includes(scratch) || line.includes(standIn) || line.includes(standInCopy));
}

async function expectNothingLeft(output: string, started = 3): Promise<void> {
  const pids = startedPids(output);
  expect(pids.length, output).toBe(started);
  await expect.poll(() => pids.filter(pidAlive), { timeout: 10_000 }).toEqual([]);
  await expect.poll(leftoverProcesses, { timeout: 10_000 }).toEqual([]);
}

beforeAll(async () => {
  ({ env } = await demoEnv(scratch));
});

afterAll(async () => {
  // Only if a failed test left something: the demo's own clean-up.
  await runDemo(env, ['--stop']);
  rmSync(scratch, { recursive: true, force: true });
}, 60_000);

describe('npm run demo -- --service', () => {
  it('serves the PD service, answers its curl through router, prefill and decode, and leaves nothing running', async () => {
    const run = await runDemo(env, ['--service']);
    expect(run.code, run.output).toBe(0);
    const curl = /^ {2}curl -sS (http:\/\/127\.0\.0\.1:\d+\/services\/pd-service-local\/)v1\/chat\/completions -H 'Authorization: Bearer (\S+)' .*$/m.exec(run.output);
    expect(curl, run.output).not.toBeNull();
    expect(run.output).toContain(`pd-service-local serves at ${curl?.[1]}`);
    expect(run.output).toContain(`token: ${curl?.[2]}`);
    // The answer names the replicas it went through, one of each group.
    expect(run.output).toMatch(/^answer: \[router\/0 -> prefill\/0 -> decode\/[01]\] Hello, world$/m);
    expect(run.output).toContain('pd-service-local: TERMINATED (STOPPED_BY_USER)');
    await expectNothingLeft(run.output);
  }, 90_000);

  it('stops the service and all it started on Ctrl-C', async () => {
    let interrupted = false;
    const run = await runDemo(env, ['--service'], (output, child) => {
      if (!interrupted && /pd-service-local: RUNNING/.test(output)) {
        interrupted = true;
        child.kill('SIGINT');
      }
    });
    expect(interrupted, run.output).toBe(true);
    expect(run.code, run.output).toBe(130);
    expect(run.output).toContain('Interrupted: stopping the service');
    expect(run.output).toContain('pd-service-local: TERMINATED (STOPPED_BY_USER)');
    await expectNothingLeft(run.output);
  }, 90_000);

  it('leaves what a killed demo started to npm run demo -- --stop', async () => {
    let killed = false;
    const run = await runDemo(env, ['--service'], (output, child) => {
      if (!killed && /started a worker \(pid \d+/.test(output)) {
        killed = true;
        child.kill('SIGKILL');
      }
    });
    expect(killed, run.output).toBe(true);
    expect(startedPids(run.output).filter(pidAlive).length, run.output).toBe(3);
    const stop = await runDemo(env, ['--stop']);
    expect(stop.code, stop.output).toBe(0);
    expect(stop.output).toContain("service demo's worker stopped");
    expect(stop.output).toContain("service demo's gateway stopped");
    await expectNothingLeft(run.output);
  }, 90_000);
});
