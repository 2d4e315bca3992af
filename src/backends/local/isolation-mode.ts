/**
 * Whether the local fleet isolates its jobs here (job-isolation.ts says how): as root, unless
 * TROUPE_LOCAL_ISOLATION=0 (for debugging). Without root there is none, and the worker and
 * `troupe apply` say so.
 */

/** True when this process can and should isolate local jobs. */
export function isolationWanted(): boolean {
  return isolationMissingReason() === null;
}

/** Why local jobs are not isolated here, or null when they are. */
export function isolationMissingReason(): string | null {
  if (process.getuid?.() !== 0) return 'not root';
  if (process.env.TROUPE_LOCAL_ISOLATION === '0') return 'TROUPE_LOCAL_ISOLATION=0';
  return null;
}

/** One line for the worker's and `troupe apply`'s output when local jobs are not isolated, else null. */
export function isolationNotice(subject: string): string | null {
  const reason = isolationMissingReason();
  if (reason === null) return null;
  return `${subject} does not isolate jobs (${reason}): they run as this user and can read each other's files, the worker's and the secret key; run the worker as root to isolate them`;
}
