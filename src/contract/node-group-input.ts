import type { BackendCapabilities, Instance } from '../backends/backend';
import type { GroupPlan, JobPlan, Plan, RetryPolicy } from '../plan/plan-schema';
import type { RunOptions } from './messages';

/** What a run gives each of its group children. */
export interface NodeGroupInput {
  run_workflow_id: string;
  run_uid: string;
  submission: number;
  backend: string;
  /** What the run's backend can do: how the group provisions. */
  capabilities: BackendCapabilities;
  group: GroupPlan;
  /** This group's jobs, master first. */
  jobs: JobPlan[];
  run: Pick<Plan, 'run_name' | 'nodes_num' | 'env' | 'image' | 'working_dir' | 'fleets'>;
  group_sizes: number[];
  /** The run's group names in group order (absent in older histories). */
  group_names?: string[];
  options: RunOptions;
  /** The run's effective retry policy and when it runs out (epoch ms), for no-capacity retries. */
  retry: RetryPolicy | null;
  retry_deadline_ms: number | null;
  /** Group 0 starts unlocked; every other group waits for the run to unlock it after job 0's attempt. */
  unlocked: boolean;
  /**
   * The run heals or resizes groups (on_failure, a nodes range, on_peers_change, a quorum): the
   * group then lives until the run ends, taking new attempts of its ranks.
   */
  live: boolean;
  /**
   * The run continued as new: the group's jobs that run (at their current attempts, on their
   * machines), to supervise again instead of provisioning and starting (null: a new group).
   */
  adopt: Array<{ job: JobPlan; instance: Instance }> | null;
}
