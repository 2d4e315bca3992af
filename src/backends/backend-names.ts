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

/** What a backend's name may be: it is printed by `apply`, `ps` and the Web UI, and names a registry entry. */
export const BACKEND_NAME = /^[a-z][a-z0-9-]{0,31}$/;

/** Why a backend name is refused, or null when it is one. */
export function backendNameProblem(name: string): string | null {
  return BACKEND_NAME.test(name)
    ? null
    : `${JSON.stringify(name)} is not a backend name: lowercase letters, digits and -, starting with a letter (^[a-z][a-z0-9-]{0,31}$), e.g. ${LOCAL_BACKEND} or ${SSH_BACKEND}`;
}
