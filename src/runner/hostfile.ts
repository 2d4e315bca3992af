import type { ClusterInfo } from './cluster-info';

/**
 * The MPI hostfile: one line per job in job_num order, `<ip> slots=<gpus>`, and `<ip>` alone for
 * a node without GPUs (Open MPI then counts its cores). Without `gpus_per_node` (a payload from
 * before the field existed) every node gets `gpus_per_job`.
 */
export function renderHostfile(cluster: ClusterInfo): string {
  const ips = cluster.job_ips;
  const slots = cluster.gpus_per_node.length > 0 ? cluster.gpus_per_node : ips.map(() => cluster.gpus_per_job);
  if (slots.length !== ips.length) {
    throw new Error(`cannot write the MPI hostfile: ${ips.length} job addresses but ${slots.length} GPU counts (gpus_per_node)`);
  }
  return ips
    .map((ip, jobNum) => {
      // Troupe guarantees every address before start; an empty one is a bug, never an empty line.
      if (!ip) throw new Error(`cannot write the MPI hostfile: job ${jobNum} has no address`);
      const gpus = slots[jobNum] ?? 0;
      return gpus > 0 ? `${ip} slots=${gpus}\n` : `${ip}\n`;
    })
    .join('');
}
