import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { InstanceUnreachableError, SubmissionClosedError, type Backend, type JobFiles, type JobRef } from '../src/backends/backend';
import type { JobPlan } from '../src/plan/plan-schema';
import type { AddressBook } from '../workflows/messages';
import { buildClusterInfo } from '../src/runner/cluster-info';
import { renderJobFiles } from '../src/runner/job-files';
import { describeProbeAnswer, renderProbeScript } from '../src/runner/ready-probe';
import { loadSecretKey, openEnv, SecretKeyError } from '../src/secrets/sealed-env';
import { FailureType } from '../workflows/failure-types';
import { backendFor } from './backend-lookup';
import { whileHeartbeating } from './heartbeat';
import type { BackendRegistry, JobCall, ReadLogInput, StartJobInput, WaitReadyInput, WatchJobInput } from './index';

/** A node that does not answer for this long fails its job with INSTANCE_UNREACHABLE. */
export const UNREACHABLE_LIMIT_MS = 30_000;

/** `addresses[group][node]` from job_ips in job_num order and the size of every group. */
export function addressesByGroup(jobIps: readonly string[], groupSizes: readonly number[]): string[][] {
  let next = 0;
  return groupSizes.map((size) => {
    const group = jobIps.slice(next, next + size);
    next += size;
    return group;
  });
}

/** The job's env with its sealed values opened: only here, on the way to the node. */
export function openSecrets(env: Readonly<Record<string, string>>): Record<string, string> {
  try {
    return openEnv(env, () => loadSecretKey({ create: false }));
  } catch (err) {
    if (err instanceof SecretKeyError) throw ApplicationFailure.nonRetryable(err.message, FailureType.SecretKey);
    throw err;
  }
}

/** What rendering a job's files needs from the run (once per start call or batch). */
export interface JobFilesContext {
  target: Backend;
  run: StartJobInput['run'];
  runUid: string;
  /** The run's env with its sealed values opened. */
  env: Record<string, string>;
  addresses: AddressBook;
  /** addressesByGroup() of the book. */
  byGroup: string[][];
}

/** A job's env, hostfile and launch script; throws with the job's name when no shell can carry them (retrying cannot help). */
export function renderFilesFor(ctx: JobFilesContext, ref: JobRef, planJob: JobPlan): JobFiles {
  try {
    return renderJobFiles({
      run: { ...ctx.run, env: ctx.env },
      runUid: ctx.runUid,
      job: planJob,
      cluster: buildClusterInfo(ctx.addresses.job_ips, ctx.addresses.gpus_per_node, ref.job_num),
      addresses: ctx.byGroup,
      jobDirectory: ctx.target.jobDirectory(ref),
    });
  } catch (err) {
    throw new Error(`${ref.job_name}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
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
      const ctx = {
        target,
        run: input.run,
        runUid: input.run_uid,
        env: openSecrets(input.run.env),
        addresses: input.addresses,
        byGroup: addressesByGroup(input.addresses.job_ips, input.group_sizes),
      };
      let files: JobFiles;
      try {
        files = renderFilesFor(ctx, input.job, input.plan_job);
      } catch (err) {
        throw ApplicationFailure.nonRetryable((err as Error).message, FailureType.InvalidJobFiles);
      }
      try {
        return await whileHeartbeating(() => target.startJob(input.job, files));
      } catch (err) {
        // Released, or a stop claimed the job first: starting it now would leak a process.
        if (err instanceof SubmissionClosedError) throw ApplicationFailure.nonRetryable(err.message, FailureType.SubmissionClosed);
        throw err;
      }
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

    /**
     * Probes the job's node until the probe passes or the group's deadline (absolute, so a retry
     * after a worker crash keeps the same deadline) has passed; then fails with the last answer.
     */
    async waitJobReady({ backend, job, probe, deadline_ms, label }: WaitReadyInput): Promise<void> {
      const target = backendFor(backends, backend);
      const ctx = Context.current();
      const script = renderProbeScript(probe, job.instance.internal_ip);
      let last = 'no answer yet';
      for (;;) {
        ctx.heartbeat();
        const left = deadline_ms - Date.now();
        if (left <= 0) break;
        const attemptMs = Math.max(100, Math.min(10_000, left));
        try {
          const result = await Promise.race([target.exec(job, script, attemptMs), ctx.cancelled]);
          if (result.exit_code === 0) return;
          last = describeProbeAnswer(probe, job.instance.internal_ip, result);
        } catch (err) {
          if (ctx.cancellationSignal.aborted) throw err;
          last = describeProbeAnswer(probe, job.instance.internal_ip, { error: err });
        }
        if (Date.now() + probe.interval_s * 1000 >= deadline_ms) break;
        await ctx.sleep(probe.interval_s * 1000);
      }
      throw ApplicationFailure.nonRetryable(`${label} not ready after ${probe.timeout_s}s: ${last}`, FailureType.NotReady);
    },

    async readJobLog({ backend, job, offset, limit_bytes }: ReadLogInput) {
      return await backendFor(backends, backend).readLog(job, offset, limit_bytes);
    },
  };
}
