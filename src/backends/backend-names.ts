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

/**
 * A worker's identity (what Temporal lists for each poller) ends with the backends it drives,
 * ` backends=local,ssh`, so a client can refuse a run no worker of the task queue could place
 * (an `apply` without a fleet where no worker has the local fleet) instead of failing it later.
 */
export function workerIdentity(base: string, backends: readonly string[]): string {
  return `${base} backends=${[...backends].sort().join(',')}`;
}

/** The backends a worker's identity names, or null when it names none (another program, an older worker). */
export function backendsOfWorkerIdentity(identity: string): string[] | null {
  const match = / backends=([a-z0-9,-]*)$/.exec(identity);
  return match ? (match[1] ?? '').split(',').filter(Boolean) : null;
}
