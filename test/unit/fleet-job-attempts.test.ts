import { describe, expect, it } from 'vitest';
import { allocate, release, releaseJobHost } from '../../workflows/fleet/fleet-hosts';
import type { AllocateRequest, FleetHostState, FleetState } from '../../src/contract/fleet-messages';
import { resources } from '../e2e/local-fixtures';

/** The fleet's allocation keyed by job attempt, as pure changes of its state. */

function host(index: number): FleetHostState {
  return {
    index,
    spec: { target: { hostname: `10.0.0.${index + 1}`, port: 22, user: 'root', identity_file: '/dev/null' }, internal_ip: null, network: null },
    status: 'ready',
    reason: null,
    facts: { machine: 'x86_64', arch: 'x86', cpus: 8, memory_gb: 32, disk_gb: 500, home: '/root', gpus: [], addresses: [], container_runtime: null },
    internal_ip: `10.0.0.${index + 1}`,
    host_key: null,
    jump_host_key: null,
    holder: null,
    probed_at: null,
  };
}

function fleet(hosts: number): FleetState {
  return { name: 'f', placement: 'any', hosts: Array.from({ length: hosts }, (_, i) => host(i)), closed_submissions: [], deleted: false };
}

function request(jobs: AllocateRequest['jobs']): AllocateRequest {
  return { run_id: 'r', run_name: 'run', submission: 0, group_name: 'g', resources: resources(), jobs };
}

const holders = (state: FleetState) => state.hosts.map((h) => (h.holder ? `${h.holder.job_num}/${h.holder.attempt ?? 0}` : null));

describe('fleet allocation by job attempt', () => {
  it('gives a replacement another host while the attempt before it holds its own, idempotently', () => {
    const state = fleet(3);
    const [first] = allocate(state, request([{ job_num: 0, job_name: 'j0' }]));
    // Attempt 0 holds and answers as before attempts existed: no `attempt` key at all.
    expect(state.hosts[0]!.holder).not.toHaveProperty('attempt');
    expect(first).not.toHaveProperty('attempt');
    const [second] = allocate(state, request([{ job_num: 0, job_name: 'j0', attempt: 1 }]));
    expect(second!.host_index).not.toBe(first!.host_index);
    expect(second!.attempt).toBe(1);
    expect(allocate(state, request([{ job_num: 0, job_name: 'j0', attempt: 1 }]))).toEqual([second]);
    expect(allocate(state, request([{ job_num: 0, job_name: 'j0' }]))).toEqual([first]);
    expect(holders(state)).toEqual(['0/0', '0/1', null]);
  });

  it('frees one attempt alone, once; the submission stays open; releasing the submission frees the rest', () => {
    const state = fleet(3);
    allocate(state, request([{ job_num: 0, job_name: 'j0' }, { job_num: 1, job_name: 'j1' }]));
    allocate(state, request([{ job_num: 1, job_name: 'j1', attempt: 1 }]));
    expect(releaseJobHost(state, { run_id: 'r', submission: 0, job_num: 1 })).toBe(1);
    expect(releaseJobHost(state, { run_id: 'r', submission: 0, job_num: 1 })).toBe(0);
    expect(holders(state)).toEqual(['0/0', null, '1/1']);
    expect(state.closed_submissions).toEqual([]);
    expect(allocate(state, request([{ job_num: 1, job_name: 'j1', attempt: 2 }]))[0]!.host_index).toBe(1);
    releaseJobHost(state, { run_id: 'r', submission: 0, job_num: 1, attempt: 2, lost_reason: 'no answer' });
    expect(state.hosts[1]!.status).toBe('unreachable');
    expect(state.hosts[1]!.reason).toContain('no answer');
    expect(release(state, { run_id: 'r', submission: 0 })).toBe(2);
    expect(holders(state)).toEqual([null, null, null]);
  });
});
