import { describe, expect, it } from 'vitest';
import { viewOfBook } from '../../activities/jobs';
import { buildClusterInfo } from '../../src/runner/cluster-info';
import { renderHostfile } from '../../src/runner/hostfile';
import { renderJobEnv } from '../../src/runner/job-env';
import { makePlan } from '../helpers/plans';

/** The address book after resizes (ranks appended after every group, ranks removed). */

describe('a book after resizes', () => {
  // router 0, prefill 1, decode 2; decode grew to 3 (ranks 3, 4), prefill to 2 (rank 5), decode shrank to 2 (rank 4 removed).
  const book = {
    job_ips: ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4', '10.0.0.5', '10.0.0.6'],
    gpus_per_node: [0, 2, 4, 4, 4, 2],
    job_groups: [0, 1, 2, 2, 2, 1],
    removed: [4],
  };

  it('gives each group its present nodes in rank order, and the run its present ranks', () => {
    const view = viewOfBook(book, [1, 1, 1]);
    expect(view.byGroup).toEqual([['10.0.0.1'], ['10.0.0.2', '10.0.0.6'], ['10.0.0.3', '10.0.0.4']]);
    expect(view.ranks).toEqual([0, 1, 2, 3, 5]);
    expect(view.ips).toEqual(['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4', '10.0.0.6']);
    expect(view.gpus).toEqual([0, 2, 4, 4, 2]);
    expect(view.sparse).toBe(true);
  });

  it('a node past a removed rank keeps its global rank; the counts and the hostfile are of the present nodes', () => {
    const view = viewOfBook(book, [1, 1, 1]);
    const cluster = buildClusterInfo(view.ips, view.gpus, 5, view.ranks);
    const plan = makePlan('r', [{ name: 'router', nodes: 1 }, { name: 'prefill', nodes: 1 }, { name: 'decode', nodes: 1 }]);
    const job = { ...plan.jobs[1]!, job_num: 5, node_group_job_index: 1, job_name: 'r-5-0' };
    const env = renderJobEnv({ run: { ...plan, nodes_num: 5 }, job, cluster, runId: 'id', groupNodesNum: 2, hostfilePath: '/h' });
    expect(env).toMatchObject({ DSTACK_NODE_RANK: '5', DSTACK_NODES_NUM: '5', DSTACK_GPUS_PER_NODE: '2', DSTACK_GPUS_NUM: '12', DSTACK_NODE_GROUP_NODE_RANK: '1' });
    expect(env.DSTACK_NODES_IPS?.split('\n')).toEqual(view.ips);
    expect(renderHostfile(cluster)).toBe('10.0.0.1\n10.0.0.2 slots=2\n10.0.0.3 slots=4\n10.0.0.4 slots=4\n10.0.0.6 slots=2\n');
  });

  it('a book without groups per job is read as today: contiguous groups of the plan sizes', () => {
    const view = viewOfBook({ job_ips: ['a', 'b', 'c'], gpus_per_node: [0, 1, 1] }, [1, 2]);
    expect(view).toMatchObject({ byGroup: [['a'], ['b', 'c']], ranks: [0, 1, 2], sparse: false });
  });
});
