import { describe, expect, it } from 'vitest';
import { viewOfBook } from '../../activities/jobs';
import { buildClusterInfo } from '../../src/runner/cluster-info';
import { renderHostfile } from '../../src/runner/hostfile';
import { renderJobEnv } from '../../src/runner/job-env';
import { freshJob } from '../../src/run-core/jobs';
import { quorumOf, startsInGroupOrder } from '../../src/run-core/startup-order';
import { makePlan } from '../helpers/plans';

/** The address book after resizes (ranks appended after every group, ranks removed), the quorum of `ready: {min}`, and the start-up order inside a restarted group. */

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

describe('ready: {min}', () => {
  const plan = makePlan('q', [{ name: 'a', nodes: 4 }, { name: 'b', nodes: 3 }, { name: 'c', nodes: 2 }]);
  plan.groups[0]!.ready_min = { kind: 'count', value: 2 };
  plan.groups[1]!.ready_min = { kind: 'percent', value: 50 };

  it('a count, a percentage rounded up, and all nodes without it; never more than the group has nor fewer than one', () => {
    expect(quorumOf(plan, 0, 4)).toBe(2);
    expect(quorumOf(plan, 0, 1)).toBe(1);
    expect(quorumOf(plan, 1, 3)).toBe(2);
    expect(quorumOf(plan, 1, 1)).toBe(1);
    expect(quorumOf(plan, 2, 2)).toBe(2);
  });
});

describe('startup_order inside a group that restarts', () => {
  // head 0 runs; workers 1..3 restarted whole, none running yet.
  const jobs = () => ['head', 'workers', 'workers', 'workers'].map((g, n) => freshJob(n, `r-${n}-0`, g === 'head' ? 0 : 1, g, g === 'head' ? 0 : n - 1, 't0'));
  const plan = (order: 'any' | 'master-first' | 'workers-first') =>
    makePlan('r', [{ name: 'head', nodes: 1 }, { name: 'workers', nodes: 3 }], { startup_order: order });
  const allowed = (order: 'any' | 'master-first' | 'workers-first', state: ReturnType<typeof jobs>) =>
    state.filter((j) => j.group_index === 1 && !j.removed).filter((j) => startsInGroupOrder(plan(order), state, j)).map((j) => j.job_num);

  it('master-first: the group\'s first rank, then the others once it runs', () => {
    const state = jobs();
    state[0]!.running_at = 't1';
    expect(allowed('master-first', state)).toEqual([1]);
    state[1]!.running_at = 't2';
    expect(allowed('master-first', state)).toEqual([1, 2, 3]);
  });

  it('workers-first: the others, then the first rank once all of them run (a rank removed by a resize does not count)', () => {
    const state = jobs();
    expect(allowed('workers-first', state)).toEqual([2, 3]);
    state[2]!.running_at = 't2';
    expect(allowed('workers-first', state)).toEqual([2, 3]);
    state[3]!.removed = true;
    expect(allowed('workers-first', state)).toEqual([1, 2]);
  });

  it('any: all together', () => {
    expect(allowed('any', jobs())).toEqual([1, 2, 3]);
  });
});
