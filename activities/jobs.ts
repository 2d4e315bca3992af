import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { InstanceUnreachableError } from '../src/backends/backend';
import { buildClusterInfo } from '../src/runner/cluster-info';
import { renderJobFiles } from '../src/runner/job-files';
import { FailureType } from '../workflows/failure-types';
import { backendFor } from './backend-lookup';
import { whileHeartbeating } from './heartbeat';
import type { BackendRegistry, JobCall, ReadLogInput, StartJobInput, WatchJobInput } from './index';

/** A node that does not answer for this long fails its job with INSTANCE_UNREACHABLE. */
const UNREACHABLE_LIMIT_MS = 30_000;

/** `addresses[group][node]` from job_ips in job_num order and the size of every group. */
export function addressesByGroup(jobIps: readonly string[], groupSizes: readonly number[]): string[][] {
  let next = 0;
  return groupSizes.map((size) => {
    const group = jobIps.slice(next, next + size);
    next += size;
    return group;
  });
}

export function createJobActivities(backends: BackendRegistry) {
  return {
    /** Throws a retryable RunnerNotReady until the node can run commands; the workflow's retry policy bounds the wait. */
    async waitRunnerReady({ backend, job }: JobCall): Promise<void> {
      const ready = await whileHeartbeating(() => backendFor(backends, backend).runnerReady(job));
      if (!ready) {
        throw ApplicationFailure.retryable(
          `runner of ${job.job_name} on ${job.instance.host} is not ready yet`,
          FailureType.RunnerNotReady,
        );
      }
    },

    /** Writes the job's files and starts its commands; at most once per job, however often retried. */
    async startJob(input: StartJobInput): Promise<{ pid: number }> {
      const target = backendFor(backends, input.backend);
      const cluster = buildClusterInfo(input.addresses.job_ips, input.addresses.gpus_per_node, input.job.job_num);
      const files = renderJobFiles({
        run: input.run,
        runUid: input.run_uid,
        job: input.plan_job,
        cluster,
        addresses: addressesByGroup(input.addresses.job_ips, input.group_sizes),
        jobDirectory: target.jobDirectory(input.job),
      });
      return await whileHeartbeating(() => target.startJob(input.job, files));
    },

    /**
     * Watches the job's process until it exits, heartbeating. After a worker crash the retry picks
     * the watch up again from the job's directory: the process never depended on the worker.
     */
    async watchJob({ backend, job, interval_ms }: WatchJobInput): Promise<{ exit_code: number }> {
      const target = backendFor(backends, backend);
      const ctx = Context.current();
      let unreachableSince: number | null = null;
      for (;;) {
        ctx.heartbeat();
        try {
          const state = await target.jobState(job);
          unreachableSince = null;
          if (state.state === 'exited') return { exit_code: state.exit_code };
          if (state.state === 'absent') {
            throw ApplicationFailure.nonRetryable(
              `${job.job_name} on ${job.instance.host}: its process and job directory are gone`,
              FailureType.JobVanished,
            );
          }
        } catch (err) {
          if (!(err instanceof InstanceUnreachableError)) throw err;
          unreachableSince ??= Date.now();
          if (Date.now() - unreachableSince > UNREACHABLE_LIMIT_MS) {
            throw ApplicationFailure.nonRetryable(
              `${job.instance.host} unreachable for ${UNREACHABLE_LIMIT_MS / 1000}s while running ${job.job_name}: ${err.message}`,
              FailureType.InstanceUnreachable,
            );
          }
        }
        await ctx.sleep(interval_ms);
      }
    },

    async readJobLog({ backend, job, offset, limit_bytes }: ReadLogInput) {
      return await backendFor(backends, backend).readLog(job, offset, limit_bytes);
    },
  };
}
