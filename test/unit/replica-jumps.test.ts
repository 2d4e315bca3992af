import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { jumpedHostsOf, JUMP_LOOKUP_TTL_MS, ReplicaJumps } from '../../activities/replica-jumps';
import { readReplicas, REPLICA_METRICS_MAX_BYTES } from '../../activities/replica-metrics';
import { checkUrls, createSyntheticRequestActivities } from '../../activities/synthetic-request';
import { closeAllSshSessions } from '../../src/backends/ssh/connect';
import type { SshTarget } from '../../src/backends/ssh/target';
import type { JobState } from '../../src/contract/run-state';
import type { ServiceProbe } from '../../src/plan/plan-schema';
import { clientKey, JUMP_HIDDEN, listenUntilCleanup, startJumpHost, type Jump } from '../helpers/ssh-jump-host';
import { job } from './cli-render-fixtures';

/**
 * Which of a run's replicas the worker reaches through a jump host (scaling.replica_metrics, a
 * rollout's gate A): looked up by internal address in the run's own jobs, where the SSH backend wrote
 * each host's target.
 */

const FINGERPRINT = `SHA256:${'B'.repeat(43)}`;
const JUMP: SshTarget = { hostname: '203.0.113.7', port: 22, user: 'ops', identity_file: '/keys/fleet', host_key_fingerprints: [FINGERPRINT] };
const hidden = (ip: string): SshTarget => ({ hostname: ip, port: 22, user: 'root', identity_file: '/keys/fleet', proxy_jump: JUMP });

function on(num: number, ip: string, details: Record<string, string>, patch: Partial<JobState> = {}): JobState {
  return job(num, 1, 'decode', num, { status: 'RUNNING', instance: { instance_id: `i-${num}`, host: ip, internal_ip: ip, gpus: 0, details }, ...patch });
}
const ssh = (target: SshTarget) => ({ fleet: 'f', host_index: '0', target: JSON.stringify(target), host_key: '', base_dir: '/b' });

describe('jumpedHostsOf, pure', () => {
  it('a host behind a proxy_jump is found by its internal address, with the jump and the key the fleet verified; a direct host or another backend is not', () => {
    const hosts = jumpedHostsOf([
      on(0, '10.0.1.9', ssh(hidden('10.0.1.9'))),
      on(1, '192.0.2.4', ssh({ hostname: '192.0.2.4', port: 22, user: 'root', identity_file: '/keys/fleet' })),
      on(2, '127.0.0.1', { state_dir: '/tmp/x' }),
      on(3, '10.0.1.10', { target: '{not json' }),
      on(4, '10.0.1.11', { target: JSON.stringify({ hostname: '10.0.1.11' }) }),
    ]);
    expect([...hosts.keys()]).toEqual(['10.0.1.9']);
    expect(hosts.get('10.0.1.9')?.proxy_jump).toEqual(JUMP);
  });

  it('a host reached by another name than its private address (internal_ip, no proxy_jump) is found too: the worker tries it straight first', () => {
    const own: SshTarget = { hostname: 'gpu-0.example.com', port: 22, user: 'root', identity_file: '/keys/fleet' };
    const hosts = jumpedHostsOf([on(0, '10.0.1.12', ssh(own))]);
    expect(hosts.get('10.0.1.12')).toEqual(own);
  });

  it('a live job wins over a removed one that had the same address', () => {
    const direct = ssh({ hostname: '10.0.1.9', port: 22, user: 'root', identity_file: '/keys/fleet' });
    expect(jumpedHostsOf([on(0, '10.0.1.9', direct), on(1, '10.0.1.9', ssh(hidden('10.0.1.9')), { removed: true })]).size).toBe(0);
    expect(jumpedHostsOf([on(0, '10.0.1.9', ssh(hidden('10.0.1.9'))), on(1, '10.0.1.9', direct, { removed: true })]).size).toBe(1);
  });
});

describe('ReplicaJumps: the run asked once per new address, and again once its answer is old', () => {
  it('asks on the first reading, not on the next with the same addresses; again for an address it did not know, or after the TTL', async () => {
    let jobs = [on(0, '10.0.1.9', ssh(hidden('10.0.1.9')))];
    const asked: string[] = [];
    const jumps = new ReplicaJumps(async (run) => {
      asked.push(run);
      return jobs;
    });
    expect([...(await jumps.hostsFor('run-a', ['10.0.1.9'], 0)).keys()]).toEqual(['10.0.1.9']);
    await jumps.hostsFor('run-a', ['10.0.1.9'], 2_000);
    expect(asked).toEqual(['run-a']);
    jobs = [...jobs, on(1, '10.0.1.12', ssh(hidden('10.0.1.12')))];
    expect([...(await jumps.hostsFor('run-a', ['10.0.1.9', '10.0.1.12'], 4_000)).keys()]).toEqual(['10.0.1.9', '10.0.1.12']);
    expect(asked).toEqual(['run-a', 'run-a']);
    await jumps.hostsFor('run-b', ['10.0.1.9'], 4_000);
    await jumps.hostsFor('run-a', ['10.0.1.9'], 4_000 + JUMP_LOOKUP_TTL_MS + 1);
    expect(asked).toEqual(['run-a', 'run-a', 'run-b', 'run-a']);
  });

  it('a failed lookup is thrown and not kept', async () => {
    let fail = true;
    const jumps = new ReplicaJumps(async () => {
      if (fail) throw new Error('query timed out');
      return [on(0, '10.0.1.9', ssh(hidden('10.0.1.9')))];
    });
    await expect(jumps.hostsFor('run-a', ['10.0.1.9'], 0)).rejects.toThrow('query timed out');
    fail = false;
    expect((await jumps.hostsFor('run-a', ['10.0.1.9'], 1)).size).toBe(1);
  });
});

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  await closeAllSshSessions();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
const atCleanup = (cleanup: () => Promise<void> | void): void => void cleanups.push(cleanup);

/** A replica at 127.0.0.1 (JUMP_HIDDEN as the jump host forwards it): its counter, a redirect, an error page, too much, a request's body said back, or no answer. */
async function replica(): Promise<number> {
  const server = createServer((req, res) => {
    if (req.url === '/generate') {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      return req.on('end', () => res.writeHead(req.method === 'POST' && req.headers['x-probe'] === 'gate' && body === '{"p":1}' ? 200 : 400).end(body));
    }
    if (req.url === '/silent') return;
    if (req.url === '/moved') return res.writeHead(302, { location: 'http://169.254.169.254/' }).end();
    if (req.url === '/broken') return res.writeHead(500).end('secret-token-in-an-error-page');
    if (req.url === '/huge') return res.end('#'.repeat(REPLICA_METRICS_MAX_BYTES + 1));
    res.end('# TYPE answered_total counter\nanswered_total{code="200"} 40\nanswered_total{code="500"} 2\n');
  });
  return await listenUntilCleanup(server, () => server.closeAllConnections(), atCleanup);
}

/** A fleet key, a jump host that lets it in, and a replica only that jump host reaches (at JUMP_HIDDEN). */
async function jumpAndReplica(): Promise<{ key: { file: string; publicSsh: Buffer }; jump: Jump; port: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-jump-'));
  atCleanup(() => rmSync(dir, { recursive: true, force: true }));
  const key = clientKey(dir, 'fleet');
  return { key, jump: await startJumpHost(key.publicSsh, atCleanup), port: await replica() };
}

/** The SSH target of JUMP_HIDDEN behind the in-process jump host at `jumpPort`. */
const behind = (keyFile: string, jumpPort: number, fingerprint: string): SshTarget => ({
  hostname: JUMP_HIDDEN,
  port: 22,
  user: 'root',
  identity_file: keyFile,
  proxy_jump: { hostname: '127.0.0.1', port: jumpPort, user: 'ops', identity_file: keyFile, host_key_fingerprints: [fingerprint] },
});

describe('readReplicas: a replica behind a jump host read through it (an ssh2 jump host in-process)', () => {
  it('its metrics summed through the jump, with the bounds of a direct read: no redirect followed, no answer echoed, 4 MiB at most; a jump that will not forward is named', async () => {
    const { key, jump, port } = await jumpAndReplica();
    const at = (path: string) => ({ group: 1, url: `http://${JUMP_HIDDEN}:${port}${path}`, names: ['answered_total'] });
    const read = await readReplicas([at('/metrics'), at('/moved'), at('/broken'), at('/huge')], new Map([[JUMP_HIDDEN, behind(key.file, jump.port, jump.fingerprint)]]));
    expect(read.replicas.map((r) => ({ values: r.values, error: r.error }))).toEqual([
      { values: { answered_total: 42 }, error: null },
      { values: null, error: 'HTTP 302' },
      { values: null, error: 'HTTP 500' },
      { values: null, error: 'its metrics are larger than 4 MiB' },
    ]);
    // One SSH connection to the jump host, a channel per reading, all to the replica.
    expect(jump.connections).toBe(1);
    expect(new Set(jump.channels.map((c) => `${c.host}:${c.port}`))).toEqual(new Set([`${JUMP_HIDDEN}:${port}`]));

    const refusing = await startJumpHost(key.publicSsh, atCleanup, false);
    const [refused] = (await readReplicas([at('/metrics')], new Map([[JUMP_HIDDEN, behind(key.file, refusing.port, refusing.fingerprint)]]))).replicas;
    expect(refused?.values).toBeNull();
    expect(refused?.error).toMatch(new RegExp(`^through jump host ops@127\\.0\\.0\\.1:${refusing.port}: forwarding to ${JUMP_HIDDEN.replaceAll('.', '\\.')}:${port}: `));
  });
});

describe("checkUrls: gate A's synthetic request to a replica behind a jump host sent through it (an ssh2 jump host in-process)", () => {
  const probe = (url: string, timeout_s = 5): ServiceProbe => ({
    type: 'http',
    url,
    method: 'post',
    headers: [{ name: 'X-Probe', value: 'gate' }],
    body: '{"p":1}',
    timeout_s,
    interval_s: 1,
    ready_after: 1,
    until_ready: false,
  });

  it('the probe as written passes through the jump (a direct replica beside it directly); its failures reported as from a direct request: the status and never the body, the timeout, a jump that will not forward named', async () => {
    const { key, jump, port } = await jumpAndReplica();
    const hiddenUrl = `http://${JUMP_HIDDEN}:${port}`;
    const jumped = new Map([[JUMP_HIDDEN, behind(key.file, jump.port, jump.fingerprint)]]);

    const passed = await checkUrls([hiddenUrl, `http://127.0.0.1:${port}`], probe('/generate'), jumped);
    expect(passed.error).toBeNull();
    expect(passed.note).toMatch(/^POST \/generate passed on 2 entry replicas \(slowest \d+ ms\)$/);
    // The hidden one's request went through the jump host, on one channel; the direct one did not.
    expect(jump.channels).toEqual([{ host: JUMP_HIDDEN, port }]);

    const broken = await checkUrls([hiddenUrl], probe('/broken'), jumped);
    expect(broken.error).toMatch(new RegExp(`^POST /broken to ${hiddenUrl.replaceAll('.', '\\.')}: HTTP 500 after \\d+ ms$`));
    expect(broken.error).not.toContain('secret');
    // A redirect is not followed: with a probe, only a 2xx passes.
    const moved = await checkUrls([hiddenUrl], { ...probe('/moved'), method: 'get', body: null }, jumped);
    expect(moved.error).toMatch(/^GET \/moved to .*: HTTP 302 after \d+ ms$/);
    // No probe: GET /, and any answer below 500 passes.
    expect((await checkUrls([hiddenUrl], null, jumped)).error).toBeNull();
    expect(jump.channels.every((c) => c.host === JUMP_HIDDEN && c.port === port)).toBe(true);

    const silent = await checkUrls([hiddenUrl], probe('/silent', 0.5), jumped);
    expect(silent.error).toBe(`POST /silent to ${hiddenUrl}: The operation was aborted due to timeout`);
    expect(jump.connections).toBe(1);

    const refusing = await startJumpHost(key.publicSsh, atCleanup, false);
    const refused = await checkUrls([hiddenUrl], probe('/generate'), new Map([[JUMP_HIDDEN, behind(key.file, refusing.port, refusing.fingerprint)]]));
    expect(refused.error).toMatch(new RegExp(`^POST /generate to ${hiddenUrl.replaceAll('.', '\\.')}: through jump host ops@127\\.0\\.0\\.1:${refusing.port}: forwarding to `));
  });
});

describe('checkRevision: the hosts behind a jump looked up in the calling run\'s jobs (MockActivityEnvironment, its client a stand-in)', () => {
  /** The activity as a RunWorkflow calls it, the run's jobs query answered by `jobs`. */
  function asTheRun(jobs: () => Promise<JobState[]>) {
    const queried: string[] = [];
    const client = {
      withAbortSignal: <R>(_signal: AbortSignal, fn: () => Promise<R>): Promise<R> => fn(),
      workflow: { getHandle: (id: string) => ({ query: async () => (queried.push(id), await jobs()) }) },
    } as unknown as Client;
    const env = new MockActivityEnvironment({ workflowType: 'RunWorkflow', workflowExecution: { workflowId: 'run-gate', runId: 'r1' } }, { client });
    return { queried, check: (urls: string[]) => env.run(createSyntheticRequestActivities().checkRevision, { urls, probe: null }) };
  }

  it('a replica whose job is on a host behind a jump is sent its request through it; a lookup that fails fails the gate, saying so', async () => {
    const { key, jump, port } = await jumpAndReplica();
    const url = `http://${JUMP_HIDDEN}:${port}`;

    const found = asTheRun(async () => [on(0, JUMP_HIDDEN, ssh(behind(key.file, jump.port, jump.fingerprint)))]);
    expect(await found.check([url])).toEqual({ error: null, note: expect.stringMatching(/^GET \/ passed on 1 entry replica/) });
    expect(found.queried).toEqual(['run-gate']);
    expect(jump.channels).toEqual([{ host: JUMP_HIDDEN, port }]);

    const failing = asTheRun(async () => {
      throw new Error('query timed out');
    });
    expect(await failing.check([url])).toEqual({ error: `GET / to ${url}: its host could not be looked up in the run's jobs: query timed out`, note: null });
  });
});

describe("readReplicas: a replica at its host's private address (no proxy_jump), straight first, else through the host", () => {
  it('goes straight where there is a route (no SSH connection), through the host itself where there is none', async () => {
    const { key, jump: host, port } = await jumpAndReplica();
    // The in-process SSH server plays the replica's host: reached by its name, it forwards its private address.
    const own: SshTarget = { hostname: '127.0.0.1', port: host.port, user: 'ops', identity_file: key.file, host_key_fingerprints: [host.fingerprint] };
    const straight = await readReplicas([{ group: 1, url: `http://127.0.0.1:${port}/metrics`, names: ['answered_total'] }], new Map([['127.0.0.1', { ...own, hostname: 'gpu-0.example.com' }]]));
    expect(straight.replicas.map((r) => r.values)).toEqual([{ answered_total: 42 }]);
    expect(host.connections).toBe(0);
    const hidden = await readReplicas([{ group: 1, url: `http://${JUMP_HIDDEN}:${port}/metrics`, names: ['answered_total'] }], new Map([[JUMP_HIDDEN, own]]));
    expect(hidden.replicas.map((r) => ({ values: r.values, error: r.error }))).toEqual([{ values: { answered_total: 42 }, error: null }]);
    expect(host.connections).toBe(1);
    expect(host.channels.map((c) => `${c.host}:${c.port}`)).toEqual([`${JUMP_HIDDEN}:${port}`]);
  });
});
