import { describe, expect, it } from 'vitest';
import { renderJobEnv } from '../../src/runner/job-env';
import { job, runView } from './runner-fixtures';

const ips = ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4'];
const cluster = { job_ips: ips, master_job_ip: ips[0]!, gpus_per_job: 8, gpus_per_node: [0, 8, 4, 4] };

describe('renderJobEnv', () => {
  it('gives a node the dstack variables and its group view', () => {
    const env = renderJobEnv({
      run: runView(),
      job: job(3, 2, 'decode', 1),
      cluster: { ...cluster, gpus_per_job: 4 },
      runId: 'run-uid-1',
      groupNodesNum: 2,
      hostfilePath: '/jobs/pd-disagg-3-0/hostfile',
    });
    expect(env).toEqual({
      DSTACK_RUN_NAME: 'pd-disagg',
      DSTACK_RUN_ID: 'run-uid-1',
      DSTACK_NODE_RANK: '3',
      DSTACK_NODES_NUM: '4',
      DSTACK_MASTER_NODE_IP: '10.0.0.1',
      DSTACK_NODES_IPS: '10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4',
      DSTACK_GPUS_PER_NODE: '4',
      DSTACK_GPUS_NUM: '16',
      DSTACK_MPI_HOSTFILE: '/jobs/pd-disagg-3-0/hostfile',
      DSTACK_NODE_GROUP_NAME: 'decode',
      DSTACK_NODE_GROUP_INDEX: '2',
      DSTACK_NODE_GROUP_NODE_RANK: '1',
      DSTACK_NODE_GROUP_NODES_NUM: '2',
    });
  });

  it('takes this node\'s GPUs from gpus_per_node, a CPU node included', () => {
    const input = { run: runView(), cluster, runId: 'r', groupNodesNum: 1, hostfilePath: '/h' };
    expect(renderJobEnv({ ...input, job: job(0, 0, 'router', 0) }).DSTACK_GPUS_PER_NODE).toBe('0');
    expect(renderJobEnv({ ...input, job: job(1, 1, 'prefill', 0) }).DSTACK_GPUS_PER_NODE).toBe('8');
    expect(renderJobEnv({ ...input, job: job(0, 0, 'router', 0) }).DSTACK_GPUS_NUM).toBe('16');
  });

  it('falls back to nodes x gpus_per_job when gpus_per_node is empty', () => {
    const env = renderJobEnv({
      run: runView({ nodes_num: 2 }),
      job: job(1, 0, '0', 1),
      cluster: { job_ips: ['10.0.0.1', '10.0.0.2'], master_job_ip: '10.0.0.1', gpus_per_job: 4, gpus_per_node: [] },
      runId: 'r',
      groupNodesNum: 2,
      hostfilePath: '/h',
    });
    expect(env.DSTACK_GPUS_PER_NODE).toBe('4');
    expect(env.DSTACK_GPUS_NUM).toBe('8');
  });

  it('applies the task env on top, as dstack does', () => {
    const env = renderJobEnv({
      run: runView({ env: { MODEL_ID: 'meta-llama/Llama-3.2-3B-Instruct', DSTACK_NODES_NUM: 'mine' } }),
      job: job(0, 0, 'router', 0),
      cluster,
      runId: 'r',
      groupNodesNum: 1,
      hostfilePath: '/h',
    });
    expect(env.MODEL_ID).toBe('meta-llama/Llama-3.2-3B-Instruct');
    expect(env.DSTACK_NODES_NUM).toBe('mine');
  });

  it('refuses a ClusterInfo that does not fit the run', () => {
    const input = { run: runView(), job: job(0, 0, 'router', 0), runId: 'r', groupNodesNum: 1, hostfilePath: '/h' };
    expect(() => renderJobEnv({ ...input, cluster: { ...cluster, job_ips: ips.slice(0, 3) } })).toThrow(
      '3 job addresses but the run has 4 nodes',
    );
    expect(() => renderJobEnv({ ...input, cluster: { ...cluster, job_ips: ['10.0.0.1', '', '10.0.0.3', '10.0.0.4'] } })).toThrow(
      'job 1 has no address',
    );
    expect(() => renderJobEnv({ ...input, cluster: { ...cluster, gpus_per_node: [1, 1] } })).toThrow('2 GPU counts');
    expect(() => renderJobEnv({ ...input, cluster, job: job(4, 2, 'decode', 2) })).toThrow('job 4 is out of range');
  });
});
