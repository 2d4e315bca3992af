import type { Instance } from '../../src/backends/backend';
import type { JobState, RunState } from '../../src/contract/run-state';

/** A PD run (router, prefill×2, decode) as RunWorkflow's query returns it, at a chosen moment. */

export const t0 = '2025-01-01T12:00:00.000Z';

export function instance(ip: string): Instance {
  return { instance_id: `i-${ip}`, host: 'local', internal_ip: ip, gpus: 0, details: {} };
}

export function job(job_num: number, group_index: number, group_name: string, group_job_index: number, patch: Partial<JobState> = {}): JobState {
  return {
    job_num,
    job_name: `pd-${job_num}-0`,
    group_index,
    group_name,
    group_job_index,
    status: 'PROVISIONING',
    termination_reason: null,
    message: null,
    instance: null,
    pid: null,
    exit_code: null,
    submitted_at: t0,
    provisioned_at: null,
    running_at: null,
    ready_at: null,
    finished_at: null,
    attempt: 0,
    restarts: 0,
    removed: false,
    revision: null,
    previous_attempts: [],
    ...patch,
  };
}

export function group(index: number, name: string, nodes: number, patch: Partial<RunState['groups'][number]> = {}): RunState['groups'][number] {
  return { index, name, nodes, waiting_for: null, nodes_range: null, restarts: 0, ...patch };
}

export function pdRun(patch: Partial<RunState> = {}, jobs?: JobState[]): RunState {
  return {
    run_name: 'pd',
    run_id: 'run/pd',
    run_uid: 'uid-1',
    backend: 'local',
    status: 'PROVISIONING',
    termination_reason: null,
    message: null,
    submission: 0,
    submitted_at: t0,
    finished_at: null,
    groups: [group(0, 'router', 1), group(1, 'prefill', 2), group(2, 'decode', 1)],
    jobs: jobs ?? [job(0, 0, 'router', 0), job(1, 1, 'prefill', 0), job(2, 1, 'prefill', 1), job(3, 2, 'decode', 0)],
    jobs_paged: false,
    peers_version: 0,
    service: null,
    ...patch,
  };
}

/** The same run with every job running on its own address. */
export function pdRunning(): RunState {
  const ips = ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5'];
  const base = pdRun();
  return pdRun(
    { status: 'RUNNING' },
    base.jobs.map((j, i) => ({
      ...j,
      status: 'RUNNING',
      instance: instance(ips[i] ?? ''),
      pid: 1000 + i,
      provisioned_at: t0,
      running_at: t0,
    })),
  );
}

/**
 * The PD run as a service, deployment 2, behind one gateway: prefill declared `replicas: 1..3` with
 * one of its two replicas READY, router and decode READY.
 */
export function pdService(): RunState {
  const running = pdRunning();
  const ready = new Set([0, 1, 3]);
  const service = { endpoints: ['http://127.0.0.1:8080/services/pd/'], auth: true, table_generation: 3, deployment: 2, rollout: null };
  return {
    ...running,
    groups: [group(0, 'router', 1), group(1, 'prefill', 2, { nodes_range: { min: 1, max: 3 } }), group(2, 'decode', 1)],
    jobs: running.jobs.map((j) => (ready.has(j.job_num) ? { ...j, status: 'READY', ready_at: t0 } : j)),
    service,
  };
}
