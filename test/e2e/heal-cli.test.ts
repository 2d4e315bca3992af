import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import type { RunState } from '../../src/contract/run-state';
import { filesNamedNow, readFileNow } from '../helpers/live-dir';
import { makeLocalFleet } from '../helpers/local-fleet';
import { useLocalTroupe } from '../helpers/local-troupe';
import { temporalAddress } from '../helpers/temporal';
import { askRouter, serverPidIn } from './local-heal-fixtures';

/**
 * examples/pd-heal-local.yml driven the way a user drives it, through the CLI: `apply -d`, a request
 * through the router, `scale` up and down, a decode node killed and replaced, `ps` showing
 * restarts, removed nodes, the group's range and the peers version, `logs --attempt` reading the
 * replaced machine's log, and the router's on_peers_change hook seeing each version.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const fleet = makeLocalFleet('troupe-heal-cli-');
const env = useLocalTroupe(fleet);
const name = `pd-heal-${Date.now().toString(36)}`;

function troupe(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['bin/troupe.js', ...args], {
    cwd: root,
    env: { ...process.env, TEMPORAL_ADDRESS: temporalAddress(), TROUPE_TASK_QUEUE: env.worker.taskQueue, NO_COLOR: '1' },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code: code ?? 1, stdout, stderr })));
}

async function waitFor(check: (s: RunState) => boolean): Promise<RunState> {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const state = await env.troupe.run(name).state();
    if (check(state)) return state;
    if (Date.now() > deadline) throw new Error(`run ${name} never got there: ${state.jobs.map((j) => `${j.job_num}:${j.status}/${j.attempt}`).join(' ')}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const upAndReady = (s: RunState) => s.status === 'RUNNING' && s.jobs.filter((j) => !j.removed).every((j) => j.status === 'READY');

/** The lines the router's hook appended to its $HOME/peers-changes.log (its job's work/ directory). */
function hookLines(): string[] {
  // Read while the run lives: a replaced node's folder may go between the walk and the read.
  return filesNamedNow(fleet.stateDir, 'peers-changes.log').flatMap((p) => (readFileNow(p) ?? '').split('\n').filter(Boolean));
}

afterAll(async () => {
  await env.troupe?.run(name).stop().catch(() => false);
  await env.troupe?.run(name).wait().catch(() => undefined);
}, 60_000);

describe('examples/pd-heal-local.yml through the CLI', () => {
  it('apply, scale up, a decode node replaced, logs of its first machine, scale down, stop', async () => {
    const applied = await troupe('apply', '-f', 'examples/pd-heal-local.yml', '-y', '-d', '--name', name);
    expect(applied.code, applied.stderr).toBe(0);
    const up = await waitFor(upAndReady);
    const routerIp = up.jobs[0]?.instance?.internal_ip ?? '';
    expect((await askRouter(routerIp)).text).toBe('Hello, world');

    const grown = await troupe('scale', name, 'decode', '3');
    expect(grown.code, grown.stderr).toBe(0);
    expect(grown.stdout).toMatch(/^decode: 3 nodes \(added ranks 4, 5\), peers version \d+\n$/);
    const version = Number(/peers version (\d+)/.exec(grown.stdout)?.[1]);
    const three = await waitFor(upAndReady);
    const decodeIps = three.jobs.filter((j) => j.group_name === 'decode').map((j) => j.instance?.internal_ip);
    expect(decodeIps).toHaveLength(3);
    // The router reads the live book on every request: each decode node gets its turn.
    const served = new Set<string>();
    for (let i = 0; i < 6; i++) served.add((await askRouter(routerIp)).decode);
    expect([...served].sort()).toEqual(['decode/0', 'decode/1', 'decode/2']);

    const refused = await troupe('scale', name, 'decode', '4');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`run ${name} did not scale group "decode" to 4: group decode takes 1..3 nodes (its nodes range), not 4`);

    // decode/0 dies: restart-node gives rank 3 a new machine while the rest keeps running.
    const routerPid = serverPidIn(three.jobs[0]?.instance?.details.netns as string);
    process.kill(serverPidIn(three.jobs[3]?.instance?.details.netns as string), 'SIGKILL');
    const healed = await waitFor((s) => s.jobs[3]?.attempt === 1 && upAndReady(s));
    expect(serverPidIn(healed.jobs[0]?.instance?.details.netns as string)).toBe(routerPid);
    expect((await askRouter(routerIp)).text).toBe('Hello, world');

    const ps = await troupe('ps');
    expect(ps.code, ps.stderr).toBe(0);
    const lines = ps.stdout.split('\n');
    const at = lines.findIndex((l) => l.startsWith(` ${name} `));
    expect(lines[0]).toMatch(/\bSTATUS\s+RESTARTS\s+HOST\b/);
    expect(lines[at]).toMatch(/router×1, prefill×2, decode×3 \(1\.\.3\)\s+RUNNING\s+local\s+.*peers version \d+/);
    expect(lines[at + 4]).toMatch(/^\s+3\s+decode\s+0\s+READY\s+1\s+local\s/);

    const first = await troupe('logs', name, '--job', '3', '--attempt', '0');
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain('decode/0: decode worker on 0.0.0.0:8000');
    const none = await troupe('logs', name, '--job', '3', '--attempt', '5');
    expect(none.code).toBe(1);
    expect(none.stderr.trim()).toBe(`job 3 (decode/0) of run ${name} has no attempt 5: its attempts are 0, 1 (1 is the current one)`);

    const shrunk = await troupe('scale', name, 'decode', '2');
    expect(shrunk.code, shrunk.stderr).toBe(0);
    expect(shrunk.stdout).toMatch(/^decode: 2 nodes \(removed rank 5\), peers version \d+\n$/);
    expect(Number(/peers version (\d+)/.exec(shrunk.stdout)?.[1])).toBeGreaterThan(version);
    const after = await troupe('ps');
    expect(after.stdout).toMatch(new RegExp(`\\n\\s+5\\s+decode\\s+2\\s+\\S+\\s+0\\s+.*TERMINATED_BY_SERVER: removed: decode resized to 2`));

    // The router's hook saw each version, the last with the two decode nodes left.
    const hooked = hookLines();
    expect(hooked.length).toBeGreaterThanOrEqual(3);
    const final = await env.troupe.run(name).state();
    const left = final.jobs.filter((j) => j.group_name === 'decode' && !j.removed).map((j) => j.instance?.internal_ip);
    expect(hooked.at(-1)).toBe(`peers version ${final.peers_version}: decode ${left.join(' ')}`);

    const stopped = await troupe('stop', name, '-y');
    expect(stopped.code, stopped.stderr).toBe(0);
    expect(stopped.stderr).toContain('STOPPED_BY_USER');
  }, 300_000);
});
