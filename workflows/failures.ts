import { ActivityFailure, ApplicationFailure, TemporalFailure } from '@temporalio/workflow';
import { failureMeaning, type FailureMeaning } from '../src/run-core/failure-table';

/** The ApplicationFailure types found in a failure and its causes (a timeout keeps the last attempt's). */
function failureTypes(err: unknown): string[] {
  const types: string[] = [];
  let current: unknown = err;
  while (current instanceof Error) {
    if (current instanceof ApplicationFailure && current.type) types.push(current.type);
    current = current instanceof TemporalFailure ? current.cause : undefined;
  }
  return types;
}

/** The innermost message of a failure: what actually went wrong, not "Activity task failed". */
export function rootMessage(err: unknown): string {
  let current: unknown = err;
  let message = err instanceof Error ? err.message : String(err);
  while (current instanceof Error) {
    if (!(current instanceof ActivityFailure) && current.message) message = current.message;
    current = current instanceof TemporalFailure ? current.cause : undefined;
  }
  return message;
}

export type ClassifiedFailure = FailureMeaning & { message: string };

/** Maps a provisioning failure to dstack's reason and the retry event it counts as (the failure table). */
export function classifyProvisioningFailure(err: unknown): ClassifiedFailure {
  const meaning = failureMeaning(failureTypes(err));
  return { ...meaning, message: meaning.reason === 'EXECUTOR_ERROR' ? `provisioning failed: ${rootMessage(err)}` : rootMessage(err) };
}

/** Maps a failure of a running batch to dstack's reason and the retry event it counts as (the failure table). */
export function classifyRunningFailure(err: unknown): ClassifiedFailure {
  return { ...failureMeaning(failureTypes(err)), message: rootMessage(err) };
}
