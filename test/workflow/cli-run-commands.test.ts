import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { RunSummary } from '../../src/client';
import { makeLocalFleet } from '../helpers/local-fleet';
import { temporalAddress, uniqueTaskQueue } from '../helpers/temporal';
import { useLocalTroupe } from '../helpers/local-troupe';

/**
 * `troupe apply | ps | logs | stop` as a user runs them: the real CLI in a child process (stdin
 * and stdout not terminals), against the dev server and a real worker on the local fleet.
 */

const cli = fileURLToPath(new URL('../../bin/troupe.js', import.meta.url));
const fleet = makeLocalFleet('troupe-cli-');
const configs = mkdtempSync(join(tmpdir(), 'troupe-cli-configs-'));
const env = useLocalTroupe(fleet, { address: false, cleanup: () => rmSync(configs, { recursive: true, force: true }) });

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

function troupeCli(
  args: string[],
  options: {
    taskQueue?: string;
    extraEnv?: Record<string, string>;
    onStderr?: (text: string, kill: (s: NodeJS.Signals) => void) => void;
    onStdout?: (text: string, kill: (s: NodeJS.Signals) => void) => void;
  } = {},
): Promise<Result> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, ...args], {
      env: {
        ...process.env,
        TEMPORAL_ADDRESS: temporalAddress(),
        TROUPE_TASK_QUEUE: options.taskQueue ?? env.worker.taskQueue,
        NO_COLOR: '1',
        ...options.extraEnv,
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      options.onStdout?.(stdout, (s) => child.kill(s));
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      options.onStderr?.(stderr, (s) => child.kill(s));
    });
    child.once('error', reject);
    child.once('close', (code) => {
      if (process.env.TROUPE_TEST_TIMING) console.log(`troupe ${args.join(' ')}: ${Date.now() - started} ms`);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end();
  });
}

let counter = 0;
function config(prefix: string, lines: string[]): { name: string; file: string } {
  const name = `${prefix}-${++counter}-${env.worker.taskQueue.slice(-8)}`;
  const file = join(configs, `${name}.yml`);
  writeFileSync(file, ['type: task', `name: ${name}`, ...lines, ''].join('\n'));
  return { name, file };
}

function twoGroups(prefix: string, workerCommand: string) {
  return config(prefix, [
    'groups:',
    '  - name: head',
    '    commands:',
    '      - echo "head $DSTACK_NODE_RANK of $DSTACK_NODES_NUM"',
    '      - echo "peer ${{ groups[1].nodes[0].IP_ADDRESS }}"',
    '  - name: workers',
    '    nodes: 2',
    '    commands:',
    `      - ${JSON.stringify(workerCommand)}`,
  ]);
}

async function listed(name: string, all = false): Promise<RunSummary | undefined> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const run = (await env.troupe.list({ all })).find((r) => r.name === name);
    if (run || Date.now() > deadline) return run;
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe('troupe apply', () => {
  it('refuses to ask for confirmation without a terminal: exit 2, pointing at -y', async () => {
    const { file } = twoGroups('cli-ask', 'true');
    const result = await troupeCli(['apply', '-f', file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('pass -y');
  });

  it('an invalid config: exit 1 with file:line:col and the field', async () => {
    const { file } = config('cli-bad', ['groups:', '  - name: a', '    nodes: 0', '    commands: [x]']);
    const result = await troupeCli(['apply', '-y', '-f', file]);
    expect(result.code).toBe(1);
    expect(result.stderr.trim()).toBe(`${file}:5:12: groups[0].nodes: expected an integer >= 1, got a number (0)`);
  });

  it('a secret key file readable by others, or a malformed key: the plan, then one line, exit 1, no stack trace', async () => {
    const { file } = config('cli-key', ['commands: [echo hi]', 'env: [HF_TOKEN=hf-not-sent]']);
    const keyFile = join(configs, 'loose.key');
    writeFileSync(keyFile, Buffer.alloc(32, 7).toString('base64'), { mode: 0o644 });
    const loose = await troupeCli(['apply', '-y', '-d', '-f', file], { extraEnv: { TROUPE_SECRET_KEY_FILE: keyFile } });
    expect(loose.code).toBe(1);
    // The plan is shown first (on stderr, as for every apply); the refusal is the one line after it.
    expect(loose.stderr.trim().split('\n').at(-1)).toBe(
      `troupe: ${keyFile}: the secret key file is readable by group or others (mode 644); run chmod 600 ${keyFile}`,
    );
    expect(loose.stderr).not.toContain('    at ');
    const malformed = await troupeCli(['apply', '-y', '-d', '-f', file], { extraEnv: { TROUPE_SECRET_KEY: 'bm90LWEta2V5' } });
    expect(malformed.code).toBe(1);
    expect(malformed.stderr.trim().split('\n').at(-1)).toBe('troupe: TROUPE_SECRET_KEY: the secret key must be 32 bytes, base64-encoded (got 9 bytes)');
    expect(malformed.stderr).not.toContain('    at ');
  });

  it('no worker on the task queue: exit 1 saying so and how to start one, instead of hanging', async () => {
    const { file } = twoGroups('cli-noworker', 'true');
    const queue = uniqueTaskQueue('nobody');
    const result = await troupeCli(['apply', '-y', '-f', file], { taskQueue: queue });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`no Troupe worker polls task queue "${queue}"`);
    expect(result.stderr).toContain('troupe worker');
  });

  it('runs to the end: plan, progress lines, job 0\'s log on stdout, exit 0', async () => {
    const { name, file } = twoGroups('cli-done', 'echo "worker $DSTACK_NODE_GROUP_NODE_RANK"');
    const result = await troupeCli(['apply', '-y', '-f', file]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^head 0 of 3\npeer \d+\.\d+\.\d+\.\d+\n$/);
    const err = result.stderr;
    expect(err).toMatch(/ GROUP\s+NODES\s+JOBS\s+RESOURCES/);
    expect(err).toMatch(/ workers\s+2\s+1-2 /);
    expect(err).toContain(`Submitted run ${name}`);
    expect(err).toMatch(/job 2 workers\/1: (PULLING|RUNNING|DONE)/);
    expect(err).toContain(`Run ${name} DONE`);
    expect(err).not.toContain('\x1b[');
  });

  it('a failed run: exit 1 with the reason and the failed job\'s message', async () => {
    const { name, file } = twoGroups('cli-fail', 'exit 7');
    const result = await troupeCli(['apply', '-y', '-f', file]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`Run ${name} FAILED`);
    expect(result.stderr).toMatch(/JOB_FAILED/);
    expect(result.stderr).toMatch(/job \d workers\/\d .*FAILED CONTAINER_EXITED_WITH_ERROR: exited with code 7/);
  });

  it('Ctrl-C detaches without stopping the run (exit 130)', async () => {
    const { name, file } = twoGroups('cli-detach', 'sleep 300');
    let sent = false;
    const result = await troupeCli(['apply', '-y', '-f', file], {
      onStderr: (text, kill) => {
        if (!sent && text.includes('log of job 0')) {
          sent = true;
          kill('SIGINT');
        }
      },
    });
    expect(result.code, result.stderr).toBe(130);
    expect(result.stderr).toContain(`Detached from run ${name}; it goes on.`);
    expect(result.stderr).toContain(`troupe stop ${name}`);
    expect((await env.troupe.run(name).state()).status).toBe('RUNNING');
    await env.troupe.run(name).abort();
    expect((await env.troupe.run(name).wait()).status).toBe('TERMINATED');
  });
});

describe('troupe ps, logs, stop', () => {
  it('-d submits and returns; ps shows a row per job; logs --group prefixes lines; stop ends the run', async () => {
    const { name, file } = twoGroups('cli-ops', 'echo "hello from $DSTACK_NODE_GROUP_NODE_RANK"; sleep 300');
    const applied = await troupeCli(['apply', '-y', '-d', '-f', file]);
    expect(applied.code, applied.stderr).toBe(0);
    expect(applied.stdout).toBe('');
    expect(applied.stderr).toContain(`troupe logs ${name} -f`);

    const handle = env.troupe.run(name);
    for await (const state of handle.watch({ intervalMs: 200 })) {
      if (state.jobs.every((j) => j.running_at !== null)) break;
    }
    await listed(name);

    const ps = await troupeCli(['ps']);
    expect(ps.code).toBe(0);
    const lines = ps.stdout.split('\n');
    const at = lines.findIndex((l) => l.startsWith(` ${name} `));
    expect(at).toBeGreaterThan(0);
    expect(lines[at]).toMatch(/head×1, workers×2\s+RUNNING\s+local/);
    expect(lines[at + 2]).toMatch(/^\s+1\s+workers\s+0\s+RUNNING\s+\S+\s+\d+\.\d+\.\d+\.\d+/);
    expect(lines[at + 3]).toMatch(/^\s+2\s+workers\s+1\s+RUNNING/);

    const json = await troupeCli(['ps', '--json']);
    const runs = JSON.parse(json.stdout) as RunSummary[];
    const run = runs.find((r) => r.name === name);
    expect(run?.state?.jobs).toHaveLength(3);

    const logs = await troupeCli(['logs', name, '--group', 'workers']);
    expect(logs.code, logs.stderr).toBe(0);
    expect(logs.stdout.split('\n').filter(Boolean).sort()).toEqual(['workers/0 | hello from 0', 'workers/1 | hello from 1']);
    const head = await troupeCli(['logs', name]);
    expect(head.stdout).toMatch(/^head 0 of 3\n/);
    const missing = await troupeCli(['logs', name, '--group', 'nope']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('its groups: head, workers');

    const attempts = await troupeCli(['logs', name, '--job', '1', '--attempt', '0']);
    expect(attempts.code, attempts.stderr).toBe(0);
    expect(attempts.stdout).toBe('hello from 0\n');
    const noAttempt = await troupeCli(['logs', name, '--job', '1', '--attempt', '2']);
    expect(noAttempt.code).toBe(1);
    expect(noAttempt.stderr.trim()).toBe(`job 1 (workers/0) of run ${name} has no attempt 2: its attempts are 0 (0 is the current one)`);

    // Following a log: Ctrl-C lets go at once (exit 130), with what was read printed.
    const followed = await troupeCli(['logs', name, '--group', 'workers', '-f'], {
      onStdout: (text, kill) => {
        if (text.includes('hello from 1')) kill('SIGINT');
      },
    });
    expect(followed.code, followed.stderr).toBe(130);
    expect(followed.stdout).toContain('workers/1 | hello from 1\n');
    expect(followed.stderr).toBe('');

    // A group of a fixed size: the run refuses to resize it, and says why.
    const scaled = await troupeCli(['scale', name, 'workers', '3']);
    expect(scaled.code).toBe(1);
    expect(scaled.stderr).toMatch(new RegExp(`^Scaling group workers of run ${name} to 3 nodes…\nrun ${name} did not scale group "workers" to 3: \\S.*\n$`));
    expect(scaled.stdout).toBe('');
    expect((await handle.state()).jobs).toHaveLength(3);

    // A task has no rollout: status says it is no service, pause is refused with the run's reason.
    const rolloutStatus = await troupeCli(['rollout', 'status', name]);
    expect({ code: rolloutStatus.code, stdout: rolloutStatus.stdout, stderr: rolloutStatus.stderr }).toEqual({ code: 1, stdout: '', stderr: `run ${name} is not a service: it has no rollouts\n` });
    const paused = await troupeCli(['rollout', 'pause', name]);
    expect({ code: paused.code, stderr: paused.stderr }).toEqual({ code: 1, stderr: `service ${name} did not pause its rollout: run ${name} is not a service\n` });

    const stopped = await troupeCli(['stop', name, '-y']);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect(stopped.stderr).toContain(`Stopping run ${name}`);
    expect(stopped.stderr).toContain(`Run ${name} TERMINATED`);
    expect(stopped.stderr).toContain('STOPPED_BY_USER');

    const again = await troupeCli(['stop', name, '-y']);
    expect(again.stderr).toContain(`Run ${name} has already ended: TERMINATED`);
    const ended = await listed(name, true);
    expect(ended?.status).toBe('TERMINATED');
    const unknown = await troupeCli(['logs', 'no-such-run']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('no run named "no-such-run"');
    const endedScale = await troupeCli(['scale', name, 'workers', '2']);
    expect(endedScale.code).toBe(1);
    expect(endedScale.stderr).toContain(`run ${name} has ended: there is no group to scale`);
    const unknownScale = await troupeCli(['scale', 'no-such-run', 'workers', '2']);
    expect(unknownScale.code).toBe(1);
    expect(unknownScale.stderr).toContain('no run named "no-such-run"');
  });
});

describe('troupe worker', () => {
  it('serves runs on its task queue and shuts down gracefully on SIGTERM', async () => {
    const queue = uniqueTaskQueue('cli-worker');
    const stateDir = mkdtempSync(join(tmpdir(), 'troupe-cli-worker-'));
    const child = spawn(process.execPath, [cli, 'worker', '--state-dir', stateDir, '--backend', 'local'], {
      env: { ...process.env, TEMPORAL_ADDRESS: temporalAddress(), TROUPE_TASK_QUEUE: queue, NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
    try {
      const deadline = Date.now() + 60_000;
      while (!stderr.includes('Troupe worker on') && Date.now() < deadline && child.exitCode === null) {
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(stderr).toContain(`task queue "${queue}", backends local`);
      const { name, file } = twoGroups('cli-own-worker', 'echo ok');
      const result = await troupeCli(['apply', '-y', '-f', file], { taskQueue: queue });
      expect(result.code, result.stderr).toBe(0);
      expect(result.stderr).toContain(`Run ${name} DONE`);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(stderr).toContain('Worker stopped.');
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      rmSync(stateDir, { recursive: true, force: true });
    }
  });

  it('refuses a backend it does not have: exit 2', async () => {
    const result = await troupeCli(['worker', '--backend', 'nope']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('unknown backend "nope" (this worker has: local, ssh)');
  });
});
