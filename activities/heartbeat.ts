import { Context } from '@temporalio/activity';

/**
 * Runs a backend call while heartbeating, so a long call (an SSH handshake, a batch of
 * namespaces) is not mistaken for a dead worker, and cancellation reaches the activity.
 */
export async function whileHeartbeating<T>(work: () => Promise<T>, everyMs = 2_000): Promise<T> {
  const ctx = Context.current();
  ctx.heartbeat();
  const timer = setInterval(() => ctx.heartbeat(), everyMs);
  try {
    return await work();
  } finally {
    clearInterval(timer);
  }
}
