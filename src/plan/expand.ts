import type { GroupPlan, JobPlan } from './plan-schema';

/**
 * One global rank space: group 0's nodes first, then group 1's, and so on. Job 0 is the global
 * master; node 0 of every group is that group's master. Job names follow dstack:
 * `<run>-<job_num>-<replica_num>`, and a task has one replica.
 */
export function expandJobs(runName: string, groups: readonly GroupPlan[], revision?: string): JobPlan[] {
  const jobs: JobPlan[] = [];
  for (const group of groups) {
    for (let node = 0; node < group.nodes; node++) jobs.push(rankPlan(runName, group, jobs.length, node, revision));
  }
  return jobs;
}

/**
 * The plan of one rank of `group` (the one way a JobPlan is made, at submission and when a resize or
 * a deployment adds a rank): dstack's job name, the group's commands and ports as they are now;
 * a service's replica also the revision (hash) of the spec it runs.
 */
export function rankPlan(runName: string, group: GroupPlan, jobNum: number, groupRank: number, revision?: string): JobPlan {
  return {
    ...(revision !== undefined ? { revision } : {}),
    job_num: jobNum,
    job_name: `${runName}-${jobNum}-0`,
    node_group_index: group.index,
    node_group_name: group.name,
    node_group_job_index: groupRank,
    global_master: jobNum === 0,
    group_master: groupRank === 0,
    commands: [...group.commands],
    ports: group.ports.map((p) => ({ ...p })),
  };
}
