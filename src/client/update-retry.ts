import { setTimeout as sleep } from 'node:timers/promises';
import { ApplicationFailure, WorkflowUpdateFailedError } from '@temporalio/client';
import { HANDING_OVER } from '../contract/messages';

/** How long an Update is asked again while the run continues as new, and how often. */
export const HANDOVER_WAIT_MS = 60_000;
export const HANDOVER_RETRY_MS = 250;

/** The run refused the Update only because it is continuing as new: the request is fine, only early. */
export function isHandingOver(err: unknown): boolean {
  return err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure && err.cause.type === HANDING_OVER;
}

/**
 * Asks `update` of the run, and again (every `retryMs`, for up to `waitMs`) while the run refuses it
 * only because it is handing over to its next execution; any other answer or error as it is.
 */
export async function askThroughHandOver<T>(update: () => Promise<T>, waitMs = HANDOVER_WAIT_MS, retryMs = HANDOVER_RETRY_MS): Promise<T> {
  for (let waitedMs = 0; ; waitedMs += retryMs) {
    try {
      return await update();
    } catch (err) {
      if (!isHandingOver(err) || waitedMs >= waitMs) throw err;
      await sleep(retryMs);
    }
  }
}
