import { describe, expect, it } from 'vitest';
import { classifyBatchFailure, failureMeaning, FailureType } from './failure-table';

/** The one failure table: what each failure type means for a job (dstack's reason, the retry event). */
describe('the failure table', () => {
  it.each<[string[], string, string]>([
    [[FailureType.NoCapacity], 'FAILED_TO_START_DUE_TO_NO_CAPACITY', 'no-capacity'],
    [[FailureType.InstanceUnreachable], 'INSTANCE_UNREACHABLE', 'interruption'],
    [[FailureType.RunnerNotReady], 'WAITING_RUNNER_LIMIT_EXCEEDED', 'error'],
    [[FailureType.NotReady], 'WAITING_READY_LIMIT_EXCEEDED', 'error'],
    // A cause's type counts as much as the failure's own; no capacity comes before a lost host.
    [['ActivityTimeout', FailureType.InstanceUnreachable, FailureType.NoCapacity], 'FAILED_TO_START_DUE_TO_NO_CAPACITY', 'no-capacity'],
    [[FailureType.InvalidJobFiles], 'EXECUTOR_ERROR', 'error'],
    [['StartFailed'], 'EXECUTOR_ERROR', 'error'],
    [[], 'EXECUTOR_ERROR', 'error'],
  ])('%j: %s, retried as %s', (types, reason, retryEvent) => {
    expect(failureMeaning(types)).toEqual({ reason, retry_event: retryEvent });
  });

  it('a batch failure keeps its message', () => {
    expect(classifyBatchFailure({ type: FailureType.NotReady, message: 'decode/0 not ready after 60s' })).toEqual({
      reason: 'WAITING_READY_LIMIT_EXCEEDED',
      retry_event: 'error',
      message: 'decode/0 not ready after 60s',
    });
  });
});
