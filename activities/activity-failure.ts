import { ApplicationFailure } from '@temporalio/common';
import { InstanceUnreachableError, NoCapacityError, SubmissionClosedError } from '../src/backends/backend';
import { FailureType, isRetryable, type BatchJobFailure, type FailureTypeName } from '../src/run-core/failure-table';
import { SecretKeyError } from '../src/secrets/sealed-env';

/**
 * The activity boundary: backends and the code below them throw domain errors only; here, and only
 * here, one becomes the Temporal failure a workflow reads, of the failure type it is reported as and
 * retried as the failure table says (src/run-core/failure-table.ts).
 */

/** The domain errors that mean something of their own, and the failure type each is reported as. */
const DOMAIN_ERRORS: ReadonlyArray<[new (message: string) => Error, FailureTypeName]> = [
  [NoCapacityError, FailureType.NoCapacity],
  [SubmissionClosedError, FailureType.SubmissionClosed],
  [InstanceUnreachableError, FailureType.InstanceUnreachable],
  [SecretKeyError, FailureType.SecretKey],
];

/** The failure type a domain error is reported as (null: not one of them). */
export function failureTypeOf(err: unknown): FailureTypeName | null {
  return DOMAIN_ERRORS.find(([kind]) => err instanceof kind)?.[1] ?? null;
}

/** A failure the activity layer itself decides (no gateway, no such backend), retried as the table says. */
export function activityFailure(type: FailureTypeName, message: string): ApplicationFailure {
  return ApplicationFailure.create({ type, message, nonRetryable: !isRetryable(type) });
}

/** A job's failure as a batch reports it: the type of a domain error, else `otherwise`. */
export function jobFailureOf(err: unknown, otherwise: FailureTypeName, message?: string): BatchJobFailure {
  return { type: failureTypeOf(err) ?? otherwise, message: message ?? (err instanceof Error ? err.message : String(err)) };
}

/** A domain error as the Temporal failure of its type; anything else (a Temporal failure included) as it is. */
export function toActivityFailure(err: unknown): unknown {
  const type = err instanceof ApplicationFailure ? null : failureTypeOf(err);
  return type === null ? err : activityFailure(type, (err as Error).message);
}

type Activity = (...args: never[]) => Promise<unknown>;

/** The same activities, each throwing its domain errors as Temporal failures (toActivityFailure). */
export function atTheBoundary<T extends Record<string, Activity>>(activities: T): T {
  const mapped = Object.entries(activities).map(([name, activity]) => {
    const wrapped = async (...args: Parameters<typeof activity>) => {
      try {
        return await activity(...args);
      } catch (err) {
        throw toActivityFailure(err);
      }
    };
    return [name, wrapped] as const;
  });
  return Object.fromEntries(mapped) as T;
}
