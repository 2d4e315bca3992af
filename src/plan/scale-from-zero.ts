/**
 * How long the gateways hold a request of a service that scales to zero while no entry replica is
 * listed (an entry group's first replica starting, or a group behind the router waking), before
 * answering 503: the table's `hold_s`, unless a group's `scaling.hold` says otherwise.
 */
export const SCALE_FROM_ZERO_HOLD_S = 300;

/**
 * A service's group that may have no replica (`replicas: 0..N` with scaling). The gateways hold the
 * service's requests while it wakes: those to it where it is an entry group, and every request of the
 * service where it is behind the router (the router would have no one to pass them to).
 * Plain (no zod, no import): the plan's schema and the run's routing both ask it.
 */
export function scalesFromZero(plan: { service?: { entry: number[] } | null }, group: { index: number; nodes_range?: { min: number } | null; scaling?: unknown }): boolean {
  return plan.service != null && group.nodes_range?.min === 0 && group.scaling != null;
}

/** A group behind the router that may have no replica: while it has none ready, the service's entry takes no request (the gateways hold them). */
export function sleepsBehindRouter(plan: { service?: { entry: number[] } | null }, group: { index: number; nodes_range?: { min: number } | null; scaling?: unknown }): boolean {
  return scalesFromZero(plan, group) && plan.service?.entry.includes(group.index) === false;
}
