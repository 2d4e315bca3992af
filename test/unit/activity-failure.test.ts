import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { activityFailure, atTheBoundary, jobFailureOf, toActivityFailure } from '../../activities/activity-failure';
import { InstanceUnreachableError, NoCapacityError, SubmissionClosedError } from '../../src/backends/backend';
import { FailureType, isRetryable } from '../../src/run-core/failure-table';
import { SecretKeyError } from '../../src/secrets/sealed-env';

/** The activity boundary: domain errors in, Temporal failures out, typed and retried as the one failure table says. */
describe('the activity boundary', () => {
  it.each<[Error, string, boolean]>([
    [new NoCapacityError('fleet gpu-a: 0 of 2 hosts free'), FailureType.NoCapacity, false],
    [new InstanceUnreachableError('host 10.0.0.7 lost'), FailureType.InstanceUnreachable, false],
    [new SubmissionClosedError('submission run-1/0 was released'), FailureType.SubmissionClosed, true],
    [new SecretKeyError('no secret key: set TROUPE_SECRET_KEY'), FailureType.SecretKey, true],
  ])('%s: %s, nonRetryable %s, the same message', (err, type, nonRetryable) => {
    const failure = toActivityFailure(err);
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure).toMatchObject({ type, nonRetryable, message: err.message });
  });

  it('anything else passes as it is: a plain error (retried as an executor error) and a Temporal failure already made', () => {
    const plain = new Error('EPIPE');
    expect(toActivityFailure(plain)).toBe(plain);
    const made = ApplicationFailure.nonRetryable('refused', 'GatewayRefused');
    expect(toActivityFailure(made)).toBe(made);
  });

  it('failures the activity layer decides take their retry from the table', () => {
    expect(activityFailure(FailureType.GatewayUnreachable, 'gateway down')).toMatchObject({ type: 'GatewayUnreachable', nonRetryable: false });
    expect(activityFailure(FailureType.GatewayRefused, '403')).toMatchObject({ type: 'GatewayRefused', nonRetryable: true });
    expect(activityFailure(FailureType.UnknownBackend, 'no backend "gpu"')).toMatchObject({ nonRetryable: true });
    expect([FailureType.NoCapacity, FailureType.InstanceUnreachable, FailureType.GatewayUnreachable].every(isRetryable)).toBe(true);
  });

  it('a job failure in a batch: the domain type where there is one, else the caller\'s, with its message', () => {
    expect(jobFailureOf(new InstanceUnreachableError('lost'), FailureType.StartFailed, 'job-1 on h did not start: lost')).toEqual({
      type: FailureType.InstanceUnreachable,
      message: 'job-1 on h did not start: lost',
    });
    expect(jobFailureOf(new Error('exit 2'), FailureType.StartFailed)).toEqual({ type: FailureType.StartFailed, message: 'exit 2' });
  });

  it('every activity is wrapped: its domain errors leave as Temporal failures, its answers unchanged', async () => {
    const activities = atTheBoundary({
      async provision(count: number): Promise<number> {
        if (count > 2) throw new NoCapacityError(`room for 2, not ${count}`);
        return count;
      },
    });
    await expect(activities.provision(2)).resolves.toBe(2);
    await expect(activities.provision(3)).rejects.toMatchObject({ type: FailureType.NoCapacity, message: 'room for 2, not 3', nonRetryable: false });
  });
});
