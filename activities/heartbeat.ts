import { Context } from '@temporalio/activity';

export interface HeartbeatOptions {
  /** Sent with every heartbeat (what a retried attempt reads back from `info.heartbeatDetails`). */
  details?: unknown;
  everyMs?: number;
}

/**
 * Runs an activity's work while heartbeating (when it is not a local activity), so a long call (an
 * SSH handshake, a batch of namespaces, a batch of jobs supervised for hours) is not mistaken for a
 * dead worker. Cancellation (which reaches the activity through its heartbeats) ends the activity at
 * once even if the work hangs: the run's teardown must not wait on a stuck backend, and
 * releaseRun() refuses whatever the call would still produce.
 */
export async function whileHeartbeating<T>(work: () => Promise<T>, { details, everyMs = 2_000 }: HeartbeatOptions = {}): Promise<T> {
  const ctx = Context.current();
  // A local activity has no heartbeat (the worker running its workflow task keeps that task alive);
  // cancellation still reaches it.
  const beat = ctx.info.isLocal ? () => undefined : () => ctx.heartbeat(details);
  beat();
  const timer = setInterval(beat, everyMs);
  try {
    return await Promise.race([work(), ctx.cancelled]);
  } finally {
    clearInterval(timer);
  }
}
