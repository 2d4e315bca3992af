import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { jumpedHostsOf, JUMP_LOOKUP_TTL_MS, ReplicaJumps } from '../../activities/replica-jumps';
import { readReplicas, REPLICA_METRICS_MAX_BYTES } from '../../activities/replica-metrics';
import { closeAllSshSessions } from '../../src/backends/ssh/connect';
import type { SshTarget } from '../../src/backends/ssh/target';
import type { JobState } from '../../src/contract/run-state';
import { clientKey, JUMP_HIDDEN, listenUntilCleanup, startJumpHost } from '../helpers/ssh-jump-host';
import { job } from './cli-render-fixtures';

/**
 * Which of a run's replicas the worker reads through a jump host (scaling.replica_metrics): looked up
 * by internal address in the run's own jobs, where the SSH backend wrote each host's target.
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

/** A replica at 127.0.0.1 (JUMP_HIDDEN as the jump host forwards it): its counter, a redirect, an error page, or too much. */
async function replica(): Promise<number> {
  const server = createServer((req, res) => {
    if (req.url === '/moved') return res.writeHead(302, { location: 'http://169.254.169.254/' }).end();
    if (req.url === '/broken') return res.writeHead(500).end('secret-token-in-an-error-page');
    if (req.url === '/huge') return res.end('#'.repeat(REPLICA_METRICS_MAX_BYTES + 1));
    res.end('# TYPE answered_total counter\nanswered_total{code="200"} 40\nanswered_total{code="500"} 2\n');
  });
  return await listenUntilCleanup(server, () => server.closeAllConnections(), atCleanup);
}

describe('readReplicas: a replica behind a jump host read through it (an ssh2 jump host in-process)', () => {
  it('its metrics summed through the jump, with the bounds of a direct read: no redirect followed, no answer echoed, 4 MiB at most; a jump that will not forward is named', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'troupe-rm-jump-'));
    atCleanup(() => rmSync(dir, { recursive: true, force: true }));
    const key = clientKey(dir, 'fleet');
    const jump = await startJumpHost(key.publicSsh, atCleanup);
    const port = await replica();
    const behind = (jumpPort: number, fingerprint: string): SshTarget => ({
      hostname: JUMP_HIDDEN,
      port: 22,
      user: 'root',
      identity_file: key.file,
      proxy_jump: { hostname: '127.0.0.1', port: jumpPort, user: 'ops', identity_file: key.file, host_key_fingerprints: [fingerprint] },
    });
    const at = (path: string) => ({ group: 1, url: `http://${JUMP_HIDDEN}:${port}${path}`, names: ['answered_total'] });
    const read = await readReplicas([at('/metrics'), at('/moved'), at('/broken'), at('/huge')], new Map([[JUMP_HIDDEN, behind(jump.port, jump.fingerprint)]]));
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
    const [refused] = (await readReplicas([at('/metrics')], new Map([[JUMP_HIDDEN, behind(refusing.port, refusing.fingerprint)]]))).replicas;
    expect(refused?.values).toBeNull();
    expect(refused?.error).toMatch(new RegExp(`^through jump host ops@127\\.0\\.0\\.1:${refusing.port}: forwarding to ${JUMP_HIDDEN.replaceAll('.', '\\.')}:${port}: `));
  });
});
