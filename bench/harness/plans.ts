import type { Resources } from '../../src/config/resources-schema';
import type { GroupPlan, JobPlan, Plan } from '../../src/plan/plan-schema';

/** Plans built by hand (as the planner would produce them), so the benches measure runs, not YAML. */

const cpu: Resources = {
  cpu: { arch: null, count: { min: 2, max: null } },
  memory: { min: 8, max: null },
  shm_size: null,
  disk: { min: 100, max: null },
  gpu: { vendor: null, name: null, count: { min: 0, max: 0 }, memory: null, total_memory: null, compute_capability: null },
};

/** `gpu: L40S` after dstack's defaults: one or more NVIDIA L40S. */
const oneL40s: Resources = {
  ...cpu,
  gpu: { vendor: 'nvidia', name: ['L40S'], count: { min: 1, max: null }, memory: null, total_memory: null, compute_capability: null },
};

export interface GroupSketch {
  name: string;
  nodes: number;
  commands: string[];
  resources?: Resources;
}

export function planOf(runName: string, groups: GroupSketch[], overrides: Partial<Plan> = {}): Plan {
  const groupPlans: GroupPlan[] = groups.map((g, index) => ({
    index,
    name: g.name,
    nodes: g.nodes,
    resources: g.resources ?? cpu,
    commands: g.commands,
    ports: [],
  }));
  const jobs: JobPlan[] = [];
  for (const group of groupPlans) {
    for (let i = 0; i < group.nodes; i++) {
      const job_num = jobs.length;
      jobs.push({
        job_num,
        job_name: `${runName}-${job_num}-0`,
        node_group_index: group.index,
        node_group_name: group.name,
        node_group_job_index: i,
        global_master: job_num === 0,
        group_master: i === 0,
        commands: group.commands,
        ports: [],
      });
    }
  }
  return {
    run_name: runName,
    nodes_num: jobs.length,
    image: null,
    working_dir: null,
    env: {},
    startup_order: 'any',
    stop_criteria: 'all-done',
    retry: null,
    max_duration_s: null,
    fleets: null,
    groups: groupPlans,
    jobs,
    ...overrides,
  };
}

export const PREFILL_IP = '${{ groups[1].nodes[0].IP_ADDRESS }}';
export const DECODE_IP = '${{ groups[2].nodes[0].IP_ADDRESS }}';

/** The commands of the seed's PD sample with the servers replaced by a tiny process. */
export function pdCommands(work: string): { router: string[]; prefill: string[]; decode: string[] } {
  return {
    router: [`echo "prefill=${PREFILL_IP} decode=${DECODE_IP}"`, work],
    prefill: [work],
    decode: [work],
  };
}

/** The seed's PD-disaggregation sample: router (CPU, master) + prefill + decode (one L40S each), workers-first. */
export function pdPlan(runName: string, work: string, startupOrder: Plan['startup_order'] = 'workers-first'): Plan {
  const commands = pdCommands(work);
  return planOf(
    runName,
    [
      { name: 'router', nodes: 1, commands: commands.router },
      { name: 'prefill', nodes: 1, commands: commands.prefill, resources: oneL40s },
      { name: 'decode', nodes: 1, commands: commands.decode, resources: oneL40s },
    ],
    { startup_order: startupOrder, env: { MODEL_ID: 'meta-llama/Llama-3.2-3B-Instruct' } },
  );
}

/** `nodes` nodes spread over `groups` groups as evenly as possible (group 0 gets the remainder). */
export function spreadPlan(runName: string, nodes: number, groups: number, commands: string[] = ['true']): Plan {
  const base = Math.floor(nodes / groups);
  const sketches: GroupSketch[] = Array.from({ length: groups }, (_, i) => ({
    name: `g${i}`,
    nodes: base + (i === 0 ? nodes - base * groups : 0),
    commands,
  }));
  return planOf(runName, sketches);
}
