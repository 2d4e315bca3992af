import { describe, expect, it } from 'vitest';
import { makePlan } from '../../test/helpers/plans';
import { freshJob } from './jobs';
import { quorumOf, startsInGroupOrder } from './startup-order';

/** Start-up order: the quorum of `ready: {min}`, and `startup_order` inside a group that restarts. */

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
