/**
 * The names a worker's backend registry gives the built-in backends: what a run's `backend` says
 * (src/worker/create-worker.ts makes them). Plain constants, so workflow code may import them.
 */
export const LOCAL_BACKEND = 'local';
export const SSH_BACKEND = 'ssh';

/** A run that names fleets runs on SSH fleets unless told otherwise; else on the local fleet. */
export function defaultBackendFor(plan: { fleets?: readonly unknown[] | null }): string {
  return plan.fleets?.length ? SSH_BACKEND : LOCAL_BACKEND;
}
