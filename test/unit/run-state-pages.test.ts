import { describe, expect, it } from 'vitest';
import { withAllJobs } from '../../src/client/run-jobs';
import { TroupeClientError } from '../../src/client/errors';
import { answerOf, JOBS_INLINE_MAX_BYTES, JOBS_PAGE_MAX, jobsPage, type RunState } from '../../src/contract/run-state';
import { group, job, pdRun } from './cli-render-fixtures';

/** A run of `nodes` jobs in one group, each with a message of `messageBytes` characters. */
function runOf(nodes: number, messageBytes = 0): RunState {
  const jobs = Array.from({ length: nodes }, (_, n) => ({ ...job(n, 0, 'workers', n), message: 'x'.repeat(messageBytes) }));
  return pdRun({ groups: [group(0, 'workers', nodes)] }, jobs);
}

describe('a run state too large for one answer', () => {
  it('keeps a small state whole and leaves a large one without its jobs', () => {
    const small = runOf(3);
    expect(answerOf(small)).toBe(small);
    const large = runOf(300, 2_000);
    expect(JSON.stringify(large.jobs).length).toBeGreaterThan(JOBS_INLINE_MAX_BYTES);
    const answer = answerOf(large);
    expect(answer.jobs).toEqual([]);
    expect(answer.jobs_paged).toBe(true);
    expect(answer.status).toBe(large.status);
    expect(large.jobs).toHaveLength(300);
  });

  it('pages in order, at most JOBS_PAGE_MAX a page, whatever the caller asks', () => {
    const state = runOf(1_200);
    expect(jobsPage(state, 0, 10).map((j) => j.job_num)).toEqual([...Array(10).keys()]);
    expect(jobsPage(state, 100, 1e9)).toHaveLength(JOBS_PAGE_MAX);
    expect(jobsPage(state, -5, 2).map((j) => j.job_num)).toEqual([0, 1]);
    expect(jobsPage(state, 2.7, 1.9).map((j) => j.job_num)).toEqual([2]);
    expect(jobsPage(state, 1_199, 10).map((j) => j.job_num)).toEqual([1_199]);
    expect(jobsPage(state, 5_000, 10)).toEqual([]);
    expect(jobsPage(state, 0, -1)).toEqual([]);
  });

  it('the SDK reads every page back, and says so when the run stops answering', async () => {
    const state = runOf(1_200);
    const asked: number[] = [];
    const whole = await withAllJobs(answerOf(runOf(1_200, 1_000)), async (offset, limit) => {
      asked.push(offset);
      return jobsPage(state, offset, limit);
    });
    expect(asked).toEqual([0, 500, 1_000]);
    expect(whole.jobs_paged).toBe(false);
    expect(whole.jobs.map((j) => j.job_num)).toEqual([...Array(1_200).keys()]);

    const short = withAllJobs(answerOf(runOf(1_200, 1_000)), async (offset, limit) => (offset < 500 ? jobsPage(state, offset, limit) : []));
    await expect(short).rejects.toThrow(TroupeClientError);
    await expect(short).rejects.toThrow('answered 500 of its 1200 jobs, then none');
    const garbled = withAllJobs(answerOf(runOf(1_200, 1_000)), async () => [{ job_num: 'x' }]);
    await expect(garbled).rejects.toThrow('returned jobs this client does not understand');
  });
});
