import { ActivityFailure, ApplicationFailure, TemporalFailure } from '@temporalio/workflow';
import type { RetryEvent } from '../src/plan/plan-schema';
import { FailureType } from './failure-types';
import type { JobTerminationReason } from './run-state';

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

export interface ClassifiedFailure {
  reason: JobTerminationReason;
  retry_event: RetryEvent | null;
  message: string;
}

/** Maps a provisioning failure to dstack's reason and to the retry event it counts as. */
export function classifyProvisioningFailure(err: unknown): ClassifiedFailure {
  const types = failureTypes(err);
  if (types.includes(FailureType.NoCapacity)) {
    return { reason: 'FAILED_TO_START_DUE_TO_NO_CAPACITY', retry_event: 'no-capacity', message: rootMessage(err) };
  }
  if (types.includes(FailureType.InstanceUnreachable)) {
    return { reason: 'INSTANCE_UNREACHABLE', retry_event: 'interruption', message: rootMessage(err) };
  }
  return { reason: 'EXECUTOR_ERROR', retry_event: 'error', message: `provisioning failed: ${rootMessage(err)}` };
}

export function classifyRunningFailure(err: unknown): ClassifiedFailure {
  if (failureTypes(err).includes(FailureType.InstanceUnreachable)) {
    return { reason: 'INSTANCE_UNREACHABLE', retry_event: 'interruption', message: rootMessage(err) };
  }
  return { reason: 'EXECUTOR_ERROR', retry_event: 'error', message: rootMessage(err) };
}
