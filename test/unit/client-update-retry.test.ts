import { ApplicationFailure, WorkflowUpdateFailedError } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { HANDING_OVER } from '../../src/contract/messages';
import { askThroughHandOver, isHandingOver } from '../../src/client/update-retry';

/** What the client throws when the run's validator refuses an Update. */
function refused(message: string, type = 'Error'): WorkflowUpdateFailedError {
  return new WorkflowUpdateFailedError('Workflow Update failed', ApplicationFailure.create({ message, type }));
}

const handingOver = () => refused('run pd is continuing as new (its history is long); try again in a moment', HANDING_OVER);

describe('an Update asked through a hand-over (scaleGroup, applyService, rollout pause/resume/rollback)', () => {
  it('knows a hand-over from a refusal', () => {
    expect(isHandingOver(handingOver())).toBe(true);
    expect(isHandingOver(refused('service pd has no rollout under way'))).toBe(false);
    expect(isHandingOver(new Error('unavailable'))).toBe(false);
  });

  it('asks again while the run hands over, and answers with what the next execution says', async () => {
    let asked = 0;
    const answer = await askThroughHandOver(async () => {
      asked += 1;
      if (asked < 3) throw handingOver();
      return 'paused';
    }, 1_000, 1);
    expect({ answer, asked }).toEqual({ answer: 'paused', asked: 3 });
  });

  it('throws a refusal at once, and a hand-over that lasts longer than it waits', async () => {
    let asked = 0;
    const refusal = refused('deployment 3 of pd is paused already');
    await expect(askThroughHandOver(async () => {
      asked += 1;
      throw refusal;
    }, 1_000, 1)).rejects.toBe(refusal);
    expect(asked).toBe(1);
    asked = 0;
    await expect(askThroughHandOver(async () => {
      asked += 1;
      throw handingOver();
    }, 10, 5)).rejects.toSatisfy(isHandingOver);
    expect(asked).toBe(3);
  });
});
