/**
 * A service's entry group that may have no replica (`replicas: 0..N` with scaling): the gateways hold
 * its requests while it wakes. Plain (no zod, no import): the plan's schema and the run's routing both ask it.
 */
export function scalesFromZero(plan: { service?: { entry: number[] } }, group: { index: number; nodes_range?: { min: number } | null; scaling?: unknown }): boolean {
  return plan.service?.entry.includes(group.index) === true && group.nodes_range?.min === 0 && group.scaling != null;
}
