import type { JobFiles } from './node-files';
import type { JobPlan, Plan } from '../plan/plan-schema';
import type { ClusterInfo } from './cluster-info';
import { renderHostfile } from './hostfile';
import { interpolateCommand } from '../plan/interpolation';
import { renderJobEnv } from './job-env';
import { JobLayout } from './job-layout';
import { renderLaunchScript } from './launch-script';
import { hostEntries, isAddressLiteral, nodeHostName, renderNodeHosts, type HostEntry, type NodeIdentity } from './node-hosts';

export interface JobFilesInput {
  run: Pick<Plan, 'run_name' | 'nodes_num' | 'env' | 'image' | 'working_dir'>;
  /** The run's unique id (DSTACK_RUN_ID). */
  runUid: string;
  job: JobPlan;
  cluster: ClusterInfo;
  /** `addresses[i][j]`: address of node j of group i (for `${{ groups[i].nodes[j].IP_ADDRESS }}`). */
  addresses: readonly (readonly string[])[];
  /** The job's directory on its node (Backend.jobDirectory). */
  jobDirectory: string;
  /** The run's group names in group order (node names in /etc/hosts); absent: named by index. */
  groupNames?: readonly string[];
}

/** Everything a runner writes before starting a job: env (with TROUPE_PEERS_FILE), MPI hostfile and launch script. */
export function renderJobFiles(input: JobFilesInput): JobFiles {
  const groupNodes = input.addresses[input.job.node_group_index];
  if (!groupNodes) throw new Error(`no addresses for group ${input.job.node_group_index} (${input.job.node_group_name})`);
  const env = renderJobEnv({
    run: input.run,
    job: input.job,
    cluster: input.cluster,
    runId: input.runUid,
    groupNodesNum: groupNodes.length,
    hostfilePath: jobFilePath(input.jobDirectory, JobLayout.hostfile),
  });
  const commands = input.job.commands.map((command, i) => {
    try {
      return interpolateCommand(command, input.addresses);
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      throw new Error(`${input.job.job_name}: commands[${i}] of group ${input.job.node_group_name}: ${why}`);
    }
  });
  return {
    // Always set (the task's env still on top), also before a first book is written: a job may wait for the file.
    env: { TROUPE_PEERS_FILE: jobFilePath(input.jobDirectory, JobLayout.peers), ...env },
    hostfile: renderHostfile(input.cluster),
    script: renderLaunchScript({ commands, workingDir: input.run.working_dir, image: input.run.image }),
    image: input.run.image,
    node: nodeIdentity(input),
  };
}

/**
 * The node's host name and /etc/hosts (renderNodeHosts): itself at its own address, its peers by
 * name; null when its address is not an address literal (a backend whose nodes go by host names).
 */
function nodeIdentity(input: JobFilesInput): NodeIdentity | null {
  const { job, cluster } = input;
  const at = cluster.ranks ? cluster.ranks.indexOf(job.job_num) : job.job_num;
  const ip = cluster.job_ips[at];
  if (!ip || !isAddressLiteral(ip)) return null;
  const self = { ip, name: nodeHostName(job.node_group_name, job.node_group_index, job.node_group_job_index) };
  return renderNodeHosts(self, entriesOf(input));
}

/** The run's host entries, once per address book (every job of a batch renders from the same `addresses`). */
const entriesCache = new WeakMap<JobFilesInput['addresses'], { names: string; entries: HostEntry[] }>();

function entriesOf(input: JobFilesInput): HostEntry[] {
  const names = input.groupNames ?? input.addresses.map((_, g) => String(g));
  const key = names.join('\n');
  const known = entriesCache.get(input.addresses);
  if (known?.names === key) return known.entries;
  const entries = hostEntries(names, input.addresses);
  entriesCache.set(input.addresses, { names: key, entries });
  return entries;
}

/** `dir/name` without Node's path module: this module stays importable from workflow code. */
export function jobFilePath(jobDirectory: string, name: string): string {
  return `${jobDirectory.replace(/\/+$/, '')}/${name}`;
}
