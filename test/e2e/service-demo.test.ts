import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pidAlive, projectRoot } from '../../src/devserver/dev-server';
import { freePort } from '../helpers/free-port';

/**
 * `npm run demo -- --service` as a user runs it (its script, on ports and state directories of its
 * own here): the PD service of stand-in replicas behind a gateway answers the curl it prints,
 * router → prefill → decode, and when the demo ends — or is interrupted with Ctrl-C — nothing it
 * started is left running.
 */

const scratch = mkdtempSync(join(tmpdir(), 'troupe-service-demo-'));
const standIn = join(projectRoot, 'examples', 'services', 'stand-in-model.py');
let env: NodeJS.ProcessEnv;

interface Demo {
  code: number;
  output: string;
}

/** The demo's script; `onOutput` sees the output so far and may signal the demo (Ctrl-C). */
function demo(args: string[], onOutput?: (output: string, child: ReturnType<typeof spawn>) => void): Promise<Demo> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/demo.ts', ...args], { cwd: projectRoot, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const take = (d: Buffer) => {
      output += d.toString();
      onOutput?.(output, child);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.once('error', reject);
    child.once('exit', (code, signal) => resolve({ code: code ?? (signal ? 128 : 1), output }));
  });
}

/** The pids the demo says it started (dev server, gateway, worker). */
function startedPids(output: string): number[] {
  return [...output.matchAll(/(?:Temporal dev server at \S+ \(pid |started a gateway \(pid |started a worker \(pid )(\d+)/g)].map((m) => Number(m[1]));
}

/** Processes of this test's demo still running: its nodes (under its local state dir) and stand-in servers. */
function leftoverProcesses(): string[] {
  const ps = spawnSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
  return ps.stdout.split('\n').filter((line) => line.includes(scratch) || line.includes(standIn));
}

async function expectNothingLeft(output: string): Promise<void> {
  const pids = startedPids(output);
  expect(pids.length, output).toBe(3);
  await expect.poll(() => pids.filter(pidAlive), { timeout: 10_000 }).toEqual([]);
  await expect.poll(leftoverProcesses, { timeout: 10_000 }).toEqual([]);
}

beforeAll(async () => {
  const [port, uiPort, codecPort] = [await freePort(), await freePort(), await freePort()];
  env = {
    ...process.env,
    NO_COLOR: '1',
    TROUPE_DEV_SERVER_PORT: String(port),
    TROUPE_DEV_SERVER_UI_PORT: String(uiPort),
    TROUPE_CODEC_ENDPOINT: `http://127.0.0.1:${codecPort}`,
    TROUPE_STATE_DIR: join(scratch, 'state'),
    TROUPE_LOCAL_STATE_DIR: join(scratch, 'local'),
  };
});

afterAll(async () => {
  // Only if a failed test left something: the demo's own clean-up.
  await demo(['--stop']);
  rmSync(scratch, { recursive: true, force: true });
}, 60_000);

describe('npm run demo -- --service', () => {
  it('serves the PD service, answers its curl through router, prefill and decode, and leaves nothing running', async () => {
    const run = await demo(['--service']);
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
    const run = await demo(['--service'], (output, child) => {
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
});
