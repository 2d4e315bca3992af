import { Context } from '@temporalio/activity';

/**
 * Runs a backend call while heartbeating (when it is not a local activity), so a long call (an SSH handshake, a batch of
 * namespaces) is not mistaken for a dead worker. Cancellation (which reaches the activity through
 * its heartbeats) ends the activity at once even if the call hangs: the run's teardown must not
 * wait on a stuck backend, and releaseRun() refuses whatever the call would still produce.
 */
export async function whileHeartbeating<T>(work: () => Promise<T>, everyMs = 2_000): Promise<T> {
  const ctx = Context.current();
  // A local activity has no heartbeat (the worker running its workflow task keeps that task alive);
  // cancellation still reaches it.
  const beat = ctx.info.isLocal ? () => undefined : () => ctx.heartbeat();
  beat();
  const timer = setInterval(beat, everyMs);
  try {
    return await Promise.race([work(), ctx.cancelled]);
  } finally {
    clearInterval(timer);
  }
}
