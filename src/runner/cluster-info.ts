import { z } from 'zod';

/** What every runner gets once all addresses are known (dstack's ClusterInfo plus per-node GPUs). */
export const ClusterInfoSchema = z.object({
  /** Internal addresses in job_num order. */
  job_ips: z.array(z.string()),
  master_job_ip: z.string(),
  /** GPUs of this node (dstack's homogeneous field). */
  gpus_per_job: z.number().int().nonnegative(),
  /** GPUs of every node, in job_num order; empty in payloads from before the field existed. */
  gpus_per_node: z.array(z.number().int().nonnegative()),
  /**
   * The global rank of each entry, when the run's ranks are not 0..n-1 (a resize removed some);
   * absent: entry i is rank i.
   */
  ranks: z.array(z.number().int().nonnegative()).optional(),
});
export type ClusterInfo = z.infer<typeof ClusterInfoSchema>;

/** ClusterInfo as job `jobNum` sees it; `ranks`: the global rank of each entry when some ranks were removed. */
export function buildClusterInfo(jobIps: string[], gpusPerNode: number[], jobNum: number, ranks?: number[]): ClusterInfo {
  const master = jobIps[0];
  if (master === undefined) throw new Error('ClusterInfo needs at least one job address');
  if (gpusPerNode.length > 0 && gpusPerNode.length !== jobIps.length) {
    throw new Error(`ClusterInfo: ${jobIps.length} job addresses but ${gpusPerNode.length} GPU counts`);
  }
  const at = ranks ? ranks.indexOf(jobNum) : jobNum;
  return {
    job_ips: jobIps,
    master_job_ip: master,
    gpus_per_job: gpusPerNode[at] ?? 0,
    gpus_per_node: gpusPerNode,
    ...(ranks ? { ranks } : {}),
  };
}
