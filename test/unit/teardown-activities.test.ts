import { describe, expect, it } from 'vitest';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { Backend, JobRef, JobStopFailure } from '../../src/backends/backend';
import { createTeardownActivities } from '../../activities/teardown';
import { fakeBackend } from '../helpers/fake-backend';
import { instance } from '../helpers/run-core';

/**
 * The teardown's stopJobs activity: one call for all the jobs where the backend stops many at once
 * (the local fleet then looks at the machine's processes once, not once per batch), a call per job
 * otherwise; either way it fails naming every job that could not be stopped, and only then.
 */

const ref = (n: number): JobRef => ({ run_id: 'run-1', run_name: 'pd', submission: 0, job_num: n, job_name: `pd-${n}-0`, instance: instance(n) });
const jobs = [0, 1, 2, 3, 4].map(ref);

const stopAll = (backend: Backend) => new MockActivityEnvironment().run(() => createTeardownActivities({ fake: backend }).stopJobs({ backend: 'fake', jobs, grace_s: 3 }));

describe('stopJobs activity', () => {
  it('hands every job to the backend in one call when it stops many at once', async () => {
    const calls: Array<{ nums: number[]; grace: number }> = [];
    const backend = fakeBackend({
      stopJobs: (batch: readonly JobRef[], grace: number) => {
        calls.push({ nums: batch.map((j) => j.job_num), grace });
        return Promise.resolve([]);
      },
    });
    await stopAll(backend);
    expect(calls).toEqual([{ nums: [0, 1, 2, 3, 4], grace: 3 }]);
  });

  it('fails naming each job the backend could not stop', async () => {
    const failures: JobStopFailure[] = [
      { job: ref(1), error: new Error('processes 7, 8 survive SIGKILL') },
      { job: ref(3), error: new Error('EACCES') },
    ];
    const backend = fakeBackend({ stopJobs: () => Promise.resolve(failures) });
    await expect(stopAll(backend)).rejects.toThrow('could not stop pd-1-0: Error: processes 7, 8 survive SIGKILL; pd-3-0: Error: EACCES');
  });

  it('stops each job by stopJob without a batch method, naming the ones that failed', async () => {
    const stopped: number[] = [];
    const backend = fakeBackend({
      stopJob: (job: JobRef) => {
        if (job.job_num === 2) return Promise.reject(new Error('gone wrong'));
        stopped.push(job.job_num);
        return Promise.resolve();
      },
    });
    await expect(stopAll(backend)).rejects.toThrow('could not stop pd-2-0: Error: gone wrong');
    expect(stopped.sort()).toEqual([0, 1, 3, 4]);
  });
});
