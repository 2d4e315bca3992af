import { describe, expect, it } from 'vitest';
import { formatResources, renderPlan } from '../../src/cli/render/plan-table';
import { jobReason, renderJobsTable, renderPsTable, renderRunOutcome } from '../../src/cli/render/run-table';
import { plain, stripAnsi, styleFor, visibleLength } from '../../src/cli/render/style';
import { renderTable } from '../../src/cli/render/table';
import { formatAge, formatDuration } from '../../src/cli/render/time-text';
import type { RunSummary } from '../../src/client';
import { makePlan } from '../helpers/plans';
import { group, instance, job, pdRun, pdRunning, t0 } from './cli-render-fixtures';
import type { JobState } from '../../src/contract/run-state';

const color = { color: true };

describe('tables', () => {
  it('aligns columns by what shows on screen, colors or not, with no trailing spaces', () => {
    const rows = [
      ['0', '\x1b[32mRUNNING\x1b[0m', 'x'],
      ['12', 'FAILED', ''],
    ];
    const lines = renderTable(['JOB', 'STATUS', 'NOTE'], rows, plain, { alignRight: new Set([0]) });
    expect(lines).toEqual([' JOB  STATUS   NOTE', '   0  \x1b[32mRUNNING\x1b[0m  x', '  12  FAILED']);
    expect(lines.map(visibleLength)).toEqual([19, 16, 12]);
  });

  it('colors statuses only when asked', () => {
    const state = pdRunning();
    const colored = renderJobsTable(state, color).join('\n');
    const uncolored = renderJobsTable(state, plain).join('\n');
    expect(colored).toContain('\x1b[32mRUNNING\x1b[0m');
    expect(uncolored).not.toContain('\x1b[');
    expect(stripAnsi(colored)).toBe(uncolored);
  });

  it('turns color on for a terminal only, honouring NO_COLOR and FORCE_COLOR', () => {
    expect(styleFor({ isTTY: true }, {})).toEqual({ color: true });
    expect(styleFor({ isTTY: false }, {})).toEqual({ color: false });
    expect(styleFor({}, {})).toEqual({ color: false });
    expect(styleFor({ isTTY: true }, { NO_COLOR: '1' })).toEqual({ color: false });
    expect(styleFor({ isTTY: false }, { FORCE_COLOR: '1' })).toEqual({ color: true });
    expect(styleFor({ isTTY: true }, { FORCE_COLOR: '0' })).toEqual({ color: false });
  });

  it('shows a row per job with group, node, status, host, address, exit and reason', () => {
    const state = pdRun({ status: 'FAILED', termination_reason: 'JOB_FAILED' }, [
      job(0, 0, 'router', 0, { status: 'TERMINATED', termination_reason: 'TERMINATED_BY_SERVER', instance: instance('127.0.0.2') }),
      job(1, 1, 'prefill', 0, {
        status: 'FAILED',
        termination_reason: 'CONTAINER_EXITED_WITH_ERROR',
        message: 'exited with code 3',
        exit_code: 3,
        instance: instance('127.0.0.3'),
      }),
    ]);
    expect(renderJobsTable(state, plain)).toEqual([
      ' JOB  GROUP    NODE  STATUS      HOST   ADDRESS    EXIT  REASON',
      '   0  router      0  TERMINATED  local  127.0.0.2        TERMINATED_BY_SERVER',
      '   1  prefill     0  FAILED      local  127.0.0.3  3     CONTAINER_EXITED_WITH_ERROR: exited with code 3',
    ]);
  });

  it('ps: a row per run, then its jobs; a run without state says why', () => {
    const now = new Date(Date.parse(t0) + 75_000);
    const running: RunSummary = {
      name: 'pd',
      workflowId: 'run/pd',
      runId: 'r1',
      open: true,
      status: 'RUNNING',
      backend: 'local',
      groups: [{ name: 'router', nodes: 1 }, { name: 'prefill', nodes: 2 }, { name: 'decode', nodes: 1 }],
      fleet: 'local',
      startTime: t0,
      closeTime: null,
      state: pdRunning(),
      stateError: null,
    };
    const blind: RunSummary = { ...running, name: 'other', workflowId: 'run/other', state: null, status: 'SUBMITTED', stateError: 'no worker' };
    const lines = renderPsTable([running, blind], plain, now);
    expect(lines[0]).toMatch(/^ RUN\s+JOB\s+GROUP\s+NODE\s+STATUS\s+HOST\s+ADDRESS\s+SUBMITTED\s+REASON$/);
    expect(lines[1]).toMatch(/^ pd\s+router×1, prefill×2, decode×1\s+RUNNING\s+local\s+1 min ago$/);
    expect(lines[2]).toMatch(/^\s+0\s+router\s+0\s+RUNNING\s+local\s+127\.0\.0\.2$/);
    expect(lines[4]).toMatch(/^\s+2\s+prefill\s+1\s+RUNNING\s+local\s+127\.0\.0\.4$/);
    expect(lines[6]).toMatch(/^ other\s+.*SUBMITTED\s+local\s+1 min ago\s+state unavailable: no worker$/);
    expect(lines).toHaveLength(7);
  });

  it('ps: a job held back by depends_on says what its group waits for', () => {
    const state = pdRun({ status: 'RUNNING' }, [
      job(0, 0, 'router', 0, { status: 'PULLING', instance: instance('127.0.0.2') }),
      job(1, 1, 'prefill', 0, { status: 'RUNNING', running_at: t0, instance: instance('127.0.0.3') }),
    ]);
    state.groups = [group(0, 'router', 1, { waiting_for: 'prefill (ready 0/1)' }), group(1, 'prefill', 1)];
    const summary: RunSummary = {
      name: 'pd', workflowId: 'run/pd', runId: 'r1', open: true, status: 'RUNNING', backend: 'local',
      groups: [{ name: 'router', nodes: 1 }, { name: 'prefill', nodes: 1 }], fleet: 'local',
      startTime: t0, closeTime: null, state, stateError: null,
    };
    const lines = renderPsTable([summary], plain, new Date(Date.parse(t0) + 5_000));
    expect(lines[2]).toMatch(/^\s+0\s+router\s+0\s+PULLING\s+local\s+127\.0\.0\.2\s+waiting for prefill \(ready 0\/1\)$/);
    expect(lines[3]).toMatch(/^\s+1\s+prefill\s+0\s+RUNNING\s+local\s+127\.0\.0\.3$/);
  });

  it('outcome: the reason, then what each job that did not end cleanly said', () => {
    const state = pdRun(
      { status: 'FAILED', termination_reason: 'JOB_FAILED', message: 'job 1 (prefill/0) failed', finished_at: '2025-01-01T12:01:05.000Z' },
      [
        job(0, 0, 'router', 0, { status: 'TERMINATED', termination_reason: 'TERMINATED_BY_SERVER' }),
        job(1, 1, 'prefill', 0, { status: 'FAILED', termination_reason: 'WAITING_RUNNER_LIMIT_EXCEEDED', message: 'runner not ready after 5s', instance: instance('127.0.0.3') }),
        job(2, 1, 'prefill', 1, { status: 'DONE', termination_reason: 'DONE_BY_RUNNER', exit_code: 0 }),
      ],
    );
    expect(renderRunOutcome(state, plain)).toEqual([
      'Run pd FAILED after 1m 05s: JOB_FAILED: job 1 (prefill/0) failed',
      '  job 1 prefill/0 on local (127.0.0.3): FAILED WAITING_RUNNER_LIMIT_EXCEEDED: runner not ready after 5s',
    ]);
    expect(jobReason(job(0, 0, 'router', 0, { termination_reason: 'DONE_BY_RUNNER' }))).toBe('');
  });

  it('plan: the settings, then a row per group with its jobs and resources', () => {
    const plan = makePlan('pd', [{ name: 'router', nodes: 1 }, { name: 'prefill', nodes: 2 }, { name: 'decode', nodes: 3 }], {
      startup_order: 'workers-first',
      retry: { on_events: ['no-capacity'], duration_s: 3600 },
    });
    const decode = plan.groups[2];
    if (!decode) throw new Error('fixture');
    decode.resources = { ...decode.resources, gpu: { ...decode.resources.gpu, name: ['L40S'], count: { min: 1, max: null } } };
    const lines = renderPlan(plan, plain, { backend: 'local' });
    expect(lines.slice(0, 6)).toEqual([
      ' Run            pd',
      ' Backend        local',
      ' Nodes          6 in 3 groups',
      ' Startup order  workers-first',
      ' Stop criteria  all-done',
      ' Retry          on no-capacity for 1h 00m',
    ]);
    expect(lines.slice(9)).toEqual([
      ' GROUP    NODES  JOBS  RESOURCES                                    PORTS',
      ' router       1  0     cpu=2.. mem=8GB.. disk=100GB..               -',
      ' prefill      2  1-2   cpu=2.. mem=8GB.. disk=100GB..               -',
      ' decode       3  3-5   cpu=2.. mem=8GB.. disk=100GB.. gpu=L40S:1..  -',
    ]);
  });

  it('resources read like dstack: exact counts, open ranges, GPU name and vendor', () => {
    const base = makePlan('x', [{ name: 'a', nodes: 1 }]).groups[0]?.resources;
    if (!base) throw new Error('fixture');
    expect(formatResources({ ...base, cpu: { arch: 'arm', count: { min: 4, max: 4 } }, disk: null })).toBe('cpu=arm:4 mem=8GB..');
    expect(
      formatResources({ ...base, memory: { min: 16, max: 64 }, gpu: { ...base.gpu, vendor: 'amd', count: { min: 2, max: 8 } } }),
    ).toBe('cpu=2.. mem=16GB..64GB disk=100GB.. gpu=amd:2..8');
    // dstack's default `0..` (a GPU is optional) is left out.
    expect(formatResources({ ...base, gpu: { ...base.gpu, vendor: 'nvidia', count: { min: 0, max: null } } })).toBe(
      'cpu=2.. mem=8GB.. disk=100GB..',
    );
  });

  it('ages and durations', () => {
    const at = (s: number) => new Date(Date.parse(t0) + s * 1000);
    expect([0, 12, 60, 3599, 7200, 3 * 86400].map((s) => formatAge(t0, at(s)))).toEqual([
      'now', '12s ago', '1 min ago', '59 min ago', '2 h ago', '3 days ago',
    ]);
    expect([500, 42_000, 185_000, 7_260_000].map(formatDuration)).toEqual(['500ms', '42s', '3m 05s', '2h 01m']);
  });
});

describe('tables on a narrow terminal', () => {
  it('cut the reason column to the width, ending in …, and leave the other columns whole', () => {
    const why = 'no capacity in fleet gpu for group decode: h1: held by other/job 0; h2: unreachable; h3: cpu 1 < 2; h4: no gpu';
    const state = pdRunning();
    state.jobs[3] = { ...(state.jobs[3] as JobState), status: 'FAILED', termination_reason: 'FAILED_TO_START_DUE_TO_NO_CAPACITY', message: why };
    const wide = renderJobsTable(state, plain);
    const narrow = renderJobsTable(state, plain, 80);
    expect(wide.some((line) => line.includes(why))).toBe(true);
    expect(narrow.every((line) => line.length <= 80)).toBe(true);
    const cut = narrow.find((line) => line.includes('decode')) ?? '';
    expect(cut).toMatch(/FAILED_TO_START.*…$/);
    expect(cut.slice(0, cut.indexOf('FAILED_TO'))).toBe((wide.find((line) => line.includes('decode')) ?? '').slice(0, cut.indexOf('FAILED_TO')));
  });
});

describe("a run's outcome", () => {
  it('prints a long reason once in full: the jobs that share it point above', () => {
    const why = 'no capacity in fleet gpu for group decode: h1: held by other/job 0; h2: unreachable; h3: cpu 1 < 2; h4: no gpu';
    const failed = (j: JobState): JobState => ({ ...j, status: 'FAILED', termination_reason: 'FAILED_TO_START_DUE_TO_NO_CAPACITY', message: why });
    const state = pdRun(
      { status: 'FAILED', termination_reason: 'JOB_FAILED', message: `job 1 (prefill/0) failed: FAILED_TO_START_DUE_TO_NO_CAPACITY: ${why}` },
      pdRun().jobs.map((j) => (j.job_num === 0 ? j : failed(j))),
    );
    const lines = renderRunOutcome(state, plain);
    expect(lines.join('\n').split(why).length - 1).toBe(1);
    expect(lines[0]).toContain(why);
    expect(lines.slice(1).every((line) => line.endsWith('… (in full above)'))).toBe(true);
    // Printed in full already (by the live lines): the summary points above too.
    expect(renderRunOutcome(state, plain, new Set([`FAILED_TO_START_DUE_TO_NO_CAPACITY: ${why}`])).join('\n')).not.toContain(why);
  });
});
