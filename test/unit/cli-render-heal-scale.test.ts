import { describe, expect, it } from 'vitest';
import { describeStateChanges } from '../../src/cli/render/live-view';
import { formatOnFailure, renderPlan } from '../../src/cli/render/plan-table';
import { renderJobsTable, renderPsTable } from '../../src/cli/render/run-table';
import { describeScaleResult } from '../../src/cli/render/scale-result';
import { plain } from '../../src/cli/render/style';
import type { RunSummary } from '../../src/client';
import { logRefOf } from '../../src/client/job-attempts';
import { TroupeClientError } from '../../src/client/errors';
import { loadPlan, planToJson, PlanJsonSchema } from '../../src/plan';
import type { JobState, RunState } from '../../src/contract/run-state';
import { thrownBy } from '../helpers/refusal';
import { group, instance, pdRunning, t0 } from './cli-render-fixtures';

/** What `troupe plan`, `ps`, `scale` and `logs --attempt` show of groups that heal and scale. */

const healPlan = loadPlan(
  [
    'type: task',
    'groups:',
    '  - name: router',
    '    commands: [route]',
    '    depends_on: [prefill, decode]',
    '    on_peers_change: reload',
    '  - name: prefill',
    '    nodes: 2',
    '    commands: [serve]',
    '    ready: {http: {port: 8000, path: /health}, min: 1}',
    '  - name: decode',
    '    nodes: 1..3',
    '    commands: [serve]',
    '    depends_on: [prefill]',
    '    on_dependency_restart: restart',
    '    ready: {min: "50%"}',
    '    on_failure: {action: restart-node, max_restarts: 3, within: 10m}',
    '',
  ].join('\n'),
  'task.yml',
  { environ: {}, runName: 'heal' },
);

describe('plan', () => {
  it('shows a ranged group as `MIN (MIN..MAX)`, its quorum beside its probe, and each group\'s on_failure', () => {
    expect(renderPlan(healPlan, plain).slice(-4)).toEqual([
      ' GROUP       NODES  JOBS  RESOURCES                           PORTS  STARTS                                                       ON FAILURE',
      ' router          1  0     cpu=x86:2.. mem=8GB.. disk=100GB..  -      after prefill, decode; on_peers_change                       fail-run',
      ' prefill         2  1-2   cpu=x86:2.. mem=8GB.. disk=100GB..  -      ready: GET :8000/health, min 1                               fail-run',
      ' decode   1 (1..3)  3     cpu=x86:2.. mem=8GB.. disk=100GB..  -      after prefill (restarts with them); ready: running, min 50%  restart-node, 3 in 10m 00s',
    ]);
    expect(formatOnFailure({ action: 'restart-group', max_restarts: 2, within_s: null })).toBe('restart-group, 2 per run');
  });

  it('JSON carries the settings a group sets, and only those', () => {
    const json = planToJson(healPlan);
    expect(PlanJsonSchema.strict().safeParse(json).success).toBe(true);
    const [router, prefill, decode] = json.groups;
    expect(Object.keys(router ?? {})).toEqual(['index', 'name', 'nodes', 'resources', 'on_peers_change']);
    expect(prefill).toMatchObject({ nodes: 2, ready_min: { kind: 'count', value: 1 } });
    expect(prefill?.nodes_range).toBeUndefined();
    expect(decode).toMatchObject({
      nodes: 1,
      nodes_range: { min: 1, max: 3 },
      ready_min: { kind: 'percent', value: 50 },
      on_failure: { action: 'restart-node', max_restarts: 3, within_s: 600 },
      on_dependency_restart: 'restart',
    });
  });
});

/** The PD run after decode/0 was restarted twice, decode scaled 1 → 3 → 2 (rank 5 removed). */
function healedRun(): RunState {
  const base = pdRunning();
  const earlier = (attempt: number) => ({
    attempt,
    instance: instance(`127.0.0.${20 + attempt}`),
    status: 'FAILED',
    termination_reason: 'CONTAINER_EXITED_WITH_ERROR',
    message: 'exited with code 137',
    exit_code: 137,
    running_at: t0,
    finished_at: t0,
  });
  const decode0 = { ...(base.jobs[3] as JobState), attempt: 2, restarts: 2, previous_attempts: [earlier(0), earlier(1)] };
  const decode1 = { ...decode0, job_num: 4, job_name: 'pd-4-0', group_job_index: 1, attempt: 0, restarts: 0, previous_attempts: [], instance: instance('127.0.0.6') };
  const decode2: JobState = {
    ...decode1,
    job_num: 5,
    job_name: 'pd-5-0',
    group_job_index: 2,
    status: 'TERMINATED',
    termination_reason: 'TERMINATED_BY_SERVER',
    instance: instance('127.0.0.7'),
    removed: true,
  };
  return {
    ...base,
    peers_version: 8,
    groups: [group(0, 'router', 1), group(1, 'prefill', 2), group(2, 'decode', 2, { nodes_range: { min: 1, max: 3 }, restarts: 2 })],
    jobs: [...base.jobs, decode1, decode2].map((j) => (j.job_num === 3 ? decode0 : j)),
  };
}

describe('ps and the live view', () => {
  it('show restarts per job, removed nodes, the group\'s size with its range and the peers version', () => {
    const state = healedRun();
    const summary: RunSummary = {
      name: 'pd', workflowId: 'run/pd', runId: 'r1', open: true, status: 'RUNNING', backend: 'local',
      groups: state.groups, fleet: 'local', startTime: t0, closeTime: null, state, stateError: null,
    };
    const lines = renderPsTable([summary], plain, new Date(t0));
    expect(lines[0]).toMatch(/^ RUN\s+JOB\s+GROUP\s+NODE\s+STATUS\s+RESTARTS\s+HOST\s+ADDRESS\s+SUBMITTED\s+REASON$/);
    expect(lines[1]).toMatch(/^ pd\s+router×1, prefill×2, decode×2 \(1\.\.3\)\s+RUNNING\s+local\s+now\s+peers version 8$/);
    expect(lines[5]).toMatch(/^\s+3\s+decode\s+0\s+RUNNING\s+2\s+local\s+127\.0\.0\.5$/);
    expect(lines[6]).toMatch(/^\s+4\s+decode\s+1\s+RUNNING\s+0\s+local\s+127\.0\.0\.6$/);
    expect(lines[7]).toMatch(/^\s+5\s+decode\s+2\s+TERMINATED\s+0\s+local\s+127\.0\.0\.7\s+removed: TERMINATED_BY_SERVER$/);
    expect(renderJobsTable(state, plain)[0]).toBe(' JOB  GROUP    NODE  STATUS      RESTARTS  HOST   ADDRESS    EXIT  REASON');
  });

  it('spend no RESTARTS column while nothing was restarted', () => {
    expect(renderJobsTable(pdRunning(), plain)[0]).toBe(' JOB  GROUP    NODE  STATUS   HOST   ADDRESS    EXIT  REASON');
  });
});

describe('troupe scale', () => {
  it('says the group\'s size, the ranks added or removed, and the peers version', () => {
    expect(describeScaleResult({ group: 'decode', nodes: 3, added: [4, 5], removed: [], peers_version: 7 })).toBe(
      'decode: 3 nodes (added ranks 4, 5), peers version 7',
    );
    expect(describeScaleResult({ group: 'decode', nodes: 2, added: [], removed: [5], peers_version: 8 })).toBe(
      'decode: 2 nodes (removed rank 5), peers version 8',
    );
    expect(describeScaleResult({ group: 'decode', nodes: 1, added: [], removed: [], peers_version: 8 })).toBe('decode: 1 node (unchanged), peers version 8');
    expect(describeScaleResult({ group: 'decode', nodes: 3, added: [], removed: [], peers_version: 9, deployment: 5 })).toBe('decode: 3 nodes (as deployment 5 rolled out), peers version 9');
  });
});

describe('logs of an earlier attempt', () => {
  const state = healedRun();
  const decode0 = state.jobs[3] as JobState;

  it('read the current machine by default, an earlier one by its attempt number', () => {
    expect(logRefOf(state, decode0, undefined)).toMatchObject({ job_num: 3, attempt: 2, instance: { internal_ip: '127.0.0.5' } });
    expect(logRefOf(state, decode0, 1)).toMatchObject({ job_num: 3, attempt: 1, instance: { internal_ip: '127.0.0.21' } });
    // The first machine's ref is what it always was: no attempt field.
    const first = logRefOf(state, decode0, 0);
    expect(first).toMatchObject({ job_num: 3, run_id: 'uid-1', submission: 0, instance: { internal_ip: '127.0.0.20' } });
    expect(first && 'attempt' in first).toBe(false);
  });

  it('refuse an attempt the job does not have, listing those it has', () => {
    expect(thrownBy(() => logRefOf(state, decode0, 5), TroupeClientError).message).toBe(
      'job 3 (decode/0) of run pd has no attempt 5: its attempts are 0, 1, 2 (2 is the current one)',
    );
  });
});

describe('apply\'s live lines', () => {
  it('say when a node is restarted or removed, and when a group is resized', () => {
    const before = pdRunning();
    before.groups[2] = group(2, 'decode', 1, { nodes_range: { min: 1, max: 3 } });
    const decode0 = before.jobs[3] as JobState;
    const after: RunState = {
      ...before,
      groups: [...before.groups.slice(0, 2), group(2, 'decode', 2, { nodes_range: { min: 1, max: 3 } })],
      jobs: [
        ...before.jobs.slice(0, 3),
        { ...decode0, attempt: 1, restarts: 1, status: 'PROVISIONING', instance: null, pid: null },
        { ...decode0, job_num: 4, job_name: 'pd-4-0', group_job_index: 1, instance: instance('127.0.0.6'), pid: 1004 },
      ],
    };
    expect(describeStateChanges(before, after, plain)).toEqual([
      '  group decode: 1 → 2 nodes (1..3)',
      '  job 3 decode/0: PROVISIONING restarted (attempt 1, restart 1)',
      '  job 4 decode/1: RUNNING on local (127.0.0.6), pid 1004',
    ]);
    const removed: RunState = {
      ...after,
      jobs: after.jobs.map((j) => (j.job_num === 4 ? { ...j, removed: true, status: 'TERMINATED', termination_reason: 'TERMINATED_BY_SERVER' } : j)),
    };
    expect(describeStateChanges(after, removed, plain)).toEqual(['  job 4 decode/1: TERMINATED — removed: TERMINATED_BY_SERVER']);
  });
});
