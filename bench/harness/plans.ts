import type { Resources } from '../../src/config/resources-schema';
import type { Plan } from '../../src/plan/plan-schema';
import { cpuOnly, makePlan, type GroupSketch } from '../../test/helpers/plans';

/** Plans built by hand (as the planner would produce them), so the benches measure runs, not YAML. */


/** `gpu: L40S` after dstack's defaults: one or more NVIDIA L40S. */
const oneL40s: Resources = {
  ...cpuOnly,
  gpu: { vendor: 'nvidia', name: ['L40S'], count: { min: 1, max: null }, memory: null, total_memory: null, compute_capability: null },
};

export type { GroupSketch } from '../../test/helpers/plans';

/** The same hand-built plans as the workflow tests (test/helpers/plans.ts). */
export const planOf = makePlan;

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
