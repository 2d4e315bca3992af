import { describe, expect, it } from 'vitest';
import { jumpedHostsOf, JUMP_LOOKUP_TTL_MS, ReplicaJumps } from '../../activities/replica-jumps';
import type { SshTarget } from '../../src/backends/ssh/target';
import type { JobState } from '../../src/contract/run-state';
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
