import type { GroupPlan, JobPlan } from './plan-schema';

/**
 * One global rank space: group 0's nodes first, then group 1's, and so on. Job 0 is the global
 * master; node 0 of every group is that group's master. Job names follow dstack:
 * `<run>-<job_num>-<replica_num>`, and a task has one replica.
 */
export function expandJobs(runName: string, groups: readonly GroupPlan[]): JobPlan[] {
  const jobs: JobPlan[] = [];
  for (const group of groups) {
    for (let node = 0; node < group.nodes; node++) {
      const jobNum = jobs.length;
      jobs.push({
        job_num: jobNum,
        job_name: `${runName}-${jobNum}-0`,
        node_group_index: group.index,
        node_group_name: group.name,
        node_group_job_index: node,
        global_master: jobNum === 0,
        group_master: node === 0,
        commands: [...group.commands],
        ports: group.ports.map((p) => ({ ...p })),
      });
    }
  }
  return jobs;
}
