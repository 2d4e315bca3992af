import type { JobPlan, Plan } from '../../src/plan/plan-schema';

/** Jobs of the seed's PD-disaggregation sample: router (job 0), prefill (1), decode (2), plus a 2-node group. */
export function job(num: number, group: number, groupName: string, indexInGroup: number, commands: string[] = []): JobPlan {
  return {
    job_num: num,
    job_name: `pd-disagg-${num}-0`,
    node_group_index: group,
    node_group_name: groupName,
    node_group_job_index: indexInGroup,
    global_master: num === 0,
    group_master: indexInGroup === 0,
    commands,
    ports: [],
  };
}

export function runView(overrides: Partial<Pick<Plan, 'run_name' | 'nodes_num' | 'env' | 'image' | 'working_dir'>> = {}) {
  return {
    run_name: 'pd-disagg',
    nodes_num: 4,
    env: {},
    image: null,
    working_dir: null,
    ...overrides,
  };
}
