import { z } from 'zod';
import type { Plan } from '../plan/plan-schema';

/**
 * The config summary a run carries as its memo: readable in the Web UI, and what `ps` shows for a
 * run whose state cannot be read (no worker to answer the query).
 */
export const RunMemoSchema = z.object({
  run_name: z.string(),
  backend: z.string(),
  nodes_num: z.number().int(),
  groups: z.array(z.object({ name: z.string(), nodes: z.number().int() })),
  /** Absent (or null) when the run names no fleet. */
  fleets: z.array(z.string()).nullish(),
});
export type RunMemo = z.infer<typeof RunMemoSchema>;

export function runMemo(plan: Plan, backend: string): RunMemo {
  return {
    run_name: plan.run_name,
    backend,
    nodes_num: plan.nodes_num,
    groups: plan.groups.map((g) => ({ name: g.name, nodes: g.nodes })),
    ...(plan.fleets ? { fleets: plan.fleets } : {}),
  };
}

/** The memo of a listed or described execution, or null when it is not a Troupe memo. */
export function readRunMemo(memo: Record<string, unknown> | undefined): RunMemo | null {
  const parsed = RunMemoSchema.safeParse(memo ?? {});
  return parsed.success ? parsed.data : null;
}

/** One line for the Web UI's summary field: `pd-disagg: router×1, prefill×1, decode×1 on local`. */
export function runSummaryLine(plan: Plan, backend: string): string {
  const groups = plan.groups.map((g) => `${g.name}×${g.nodes}`).join(', ');
  const fleets = plan.fleets?.length ? ` (fleet ${plan.fleets.join(', ')})` : '';
  return `${plan.run_name}: ${groups} on ${backend}${fleets}`;
}
