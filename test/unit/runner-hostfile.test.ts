import { describe, expect, it } from 'vitest';
import { renderHostfile } from '../../src/runner/hostfile';

describe('renderHostfile', () => {
  it('writes slots per node and a bare address for a node without GPUs', () => {
    const hostfile = renderHostfile({
      job_ips: ['10.0.0.1', '10.0.0.2', '10.0.0.3'],
      master_job_ip: '10.0.0.1',
      gpus_per_job: 8,
      gpus_per_node: [8, 4, 0],
    });
    expect(hostfile).toBe('10.0.0.1 slots=8\n10.0.0.2 slots=4\n10.0.0.3\n');
  });

  it('falls back to gpus_per_job for every node when gpus_per_node is empty', () => {
    const cluster = { job_ips: ['10.0.0.1', '10.0.0.2'], master_job_ip: '10.0.0.1', gpus_per_node: [] };
    expect(renderHostfile({ ...cluster, gpus_per_job: 4 })).toBe('10.0.0.1 slots=4\n10.0.0.2 slots=4\n');
    expect(renderHostfile({ ...cluster, gpus_per_job: 0 })).toBe('10.0.0.1\n10.0.0.2\n');
  });

  it('refuses counts that do not match the addresses', () => {
    expect(() =>
      renderHostfile({ job_ips: ['10.0.0.1', '10.0.0.2'], master_job_ip: '10.0.0.1', gpus_per_job: 1, gpus_per_node: [1] }),
    ).toThrow('2 job addresses but 1 GPU counts');
    expect(() =>
      renderHostfile({ job_ips: ['10.0.0.1'], master_job_ip: '10.0.0.1', gpus_per_job: 1, gpus_per_node: [1, 1] }),
    ).toThrow('1 job addresses but 2 GPU counts');
  });

  it('refuses an empty address instead of writing an empty hostfile', () => {
    expect(() =>
      renderHostfile({ job_ips: ['10.0.0.1', ''], master_job_ip: '10.0.0.1', gpus_per_job: 0, gpus_per_node: [0, 0] }),
    ).toThrow('job 1 has no address');
  });
});
