import type { Resources } from '../../src/config/resources-schema';
import { expandJobs } from '../../src/plan/expand';
import type { GroupPlan, Plan } from '../../src/plan/plan-schema';

/** Hand-built plans for workflow tests, so they do not depend on the YAML layer. */

export const cpuOnly: Resources = {
  cpu: { arch: null, count: { min: 2, max: null } },
  memory: { min: 8, max: null },
  shm_size: null,
  disk: { min: 100, max: null },
  gpu: { vendor: null, name: null, count: { min: 0, max: 0 }, memory: null, total_memory: null, compute_capability: null },
};

/** What every SSH test host has (the hosts share this machine's cores, memory and disk). */
export const testHostSized: Resources = {
  ...cpuOnly,
  cpu: { arch: null, count: { min: 1, max: null } },
  memory: { min: 1, max: null },
  disk: { min: 1, max: null },
};

export interface GroupSketch {
  name: string;
  nodes: number;
  commands?: string[];
  resources?: Resources;
}

export function makePlan(runName: string, groups: GroupSketch[], overrides: Partial<Plan> = {}): Plan {
  const groupPlans: GroupPlan[] = groups.map((g, index) => ({
    index,
    name: g.name,
    nodes: g.nodes,
    resources: g.resources ?? cpuOnly,
    commands: g.commands ?? ['true'],
    ports: [],
  }));
  const jobs = expandJobs(runName, groupPlans);
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
