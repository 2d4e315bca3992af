import type { JobPlan, Plan } from '../plan/plan-schema';
import type { ClusterInfo } from './cluster-info';

/** What of the run the environment needs (a whole Plan fits). */
export type RunEnvView = Pick<Plan, 'run_name' | 'nodes_num' | 'env'>;

export interface JobEnvInput {
  run: RunEnvView;
  job: JobPlan;
  cluster: ClusterInfo;
  /** The run's unique id (DSTACK_RUN_ID). */
  runId: string;
  /** Nodes in the job's group (DSTACK_NODE_GROUP_NODES_NUM). */
  groupNodesNum: number;
  /** Where the job's MPI hostfile is written on its node. */
  hostfilePath: string;
}

/**
 * The environment of a job's commands: dstack's DSTACK_* variables (same names and meanings, so
 * existing commands work unchanged), Troupe's DSTACK_NODE_GROUP_* view of the job's group, and
 * TROUPE_REVISION for a service's replica, and the task's `env` on top (as dstack applies the job
 * spec's env last).
 */
export function renderJobEnv(input: JobEnvInput): Record<string, string> {
  const { run, job, cluster } = input;
  const nodes = cluster.job_ips.length;
  if (nodes !== run.nodes_num) {
    throw new Error(`ClusterInfo has ${nodes} job addresses but the run has ${run.nodes_num} nodes`);
  }
  const at = cluster.ranks ? cluster.ranks.indexOf(job.job_num) : job.job_num;
  if (at < 0 || at >= nodes) throw new Error(`job ${job.job_num} is out of range: the run has ${nodes} nodes`);
  const missing = cluster.job_ips.findIndex((ip) => !ip);
  if (missing !== -1) throw new Error(`job ${missing} has no address: a node must never see an empty one`);
  const perNode = cluster.gpus_per_node;
  if (perNode.length > 0 && perNode.length !== nodes) {
    throw new Error(`ClusterInfo has ${nodes} job addresses but ${perNode.length} GPU counts (gpus_per_node)`);
  }
  const gpusHere = perNode.length > 0 ? (perNode[at] ?? 0) : cluster.gpus_per_job;
  const gpusTotal = perNode.length > 0 ? perNode.reduce((sum, n) => sum + n, 0) : nodes * cluster.gpus_per_job;
  return {
    DSTACK_RUN_NAME: run.run_name,
    DSTACK_RUN_ID: input.runId,
    DSTACK_NODE_RANK: String(job.job_num),
    DSTACK_NODES_NUM: String(nodes),
    DSTACK_MASTER_NODE_IP: cluster.master_job_ip,
    DSTACK_NODES_IPS: cluster.job_ips.join('\n'),
    DSTACK_GPUS_PER_NODE: String(gpusHere),
    DSTACK_GPUS_NUM: String(gpusTotal),
    DSTACK_MPI_HOSTFILE: input.hostfilePath,
    DSTACK_NODE_GROUP_NAME: job.node_group_name,
    DSTACK_NODE_GROUP_INDEX: String(job.node_group_index),
    DSTACK_NODE_GROUP_NODE_RANK: String(job.node_group_job_index),
    DSTACK_NODE_GROUP_NODES_NUM: String(input.groupNodesNum),
    // Troupe's: a service replica's revision (the hash of the spec it runs).
    ...(job.revision !== undefined ? { TROUPE_REVISION: job.revision } : {}),
    ...run.env,
  };
}
