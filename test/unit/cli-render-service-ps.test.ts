import { describe, expect, it } from 'vitest';
import type { RunState, RunSummary } from '../../src/client';
import { serviceSummary } from '../../src/client';
import { renderPsTable } from '../../src/cli/render/run-table';
import { pdRunning, pdService, t0 } from './cli-render-fixtures';

const plain = { color: false };
const now = new Date(Date.parse(t0) + 75_000);

/** A summary as `TroupeClient.list` makes it from a run's state. */
function summaryOf(state: RunState): RunSummary {
  return {
    name: state.run_name, workflowId: state.run_id, runId: 'r1', open: state.finished_at === null, status: state.status,
    backend: state.backend, groups: state.groups, fleet: 'local', startTime: t0, closeTime: state.finished_at, state, stateError: null,
    service: serviceSummary(state),
  };
}

describe('troupe ps of a service', () => {
  it('says it is a service, its deployment and endpoint, then per group its replicas READY of its size, with the range where it has one', () => {
    const lines = renderPsTable([summaryOf(pdService())], plain, now);
    expect(lines[0]).toMatch(/^ RUN\s+JOB\s+GROUP\s+NODE\s+STATUS\s+HOST\s+ADDRESS\s+SUBMITTED\s+REASON$/);
    expect(lines[1]).toMatch(/^ pd\s+service, deployment=2\s+RUNNING\s+local\s+1 min ago\s+http:\/\/127\.0\.0\.1:8080\/services\/pd\/$/);
    expect(lines[2]).toMatch(/^\s+router\s+replicas 1\/1$/);
    expect(lines[3]).toMatch(/^\s+0\s+router\s+0\s+READY\s+local\s+127\.0\.0\.2$/);
    expect(lines[4]).toMatch(/^\s+prefill\s+replicas 1\/2 \(1\.\.3\)$/);
    expect(lines[5]).toMatch(/^\s+1\s+prefill\s+0\s+READY\s+local\s+127\.0\.0\.3$/);
    expect(lines[6]).toMatch(/^\s+2\s+prefill\s+1\s+RUNNING\s+local\s+127\.0\.0\.4$/);
    expect(lines[7]).toMatch(/^\s+decode\s+replicas 1\/1$/);
    expect(lines[8]).toMatch(/^\s+3\s+decode\s+0\s+READY\s+local\s+127\.0\.0\.5$/);
    expect(lines).toHaveLength(9);
  });

  it('counts only READY replicas: a group still starting has 0 of its size', () => {
    const state = pdService();
    state.jobs = state.jobs.map((j) => (j.group_name === 'decode' ? { ...j, status: 'RUNNING', ready_at: null } : j));
    expect(serviceSummary(state)?.groups).toEqual([
      { group: 'router', ready: 1, wanted: 1, range: null, revisions: [{ revision: 0, ready: 1, replicas: 1 }] },
      { group: 'prefill', ready: 1, wanted: 2, range: { min: 1, max: 3 }, revisions: [{ revision: 0, ready: 1, replicas: 2 }] },
      { group: 'decode', ready: 0, wanted: 1, range: null, revisions: [{ revision: 0, ready: 0, replicas: 1 }] },
    ]);
    expect(renderPsTable([summaryOf(state)], plain, now)[7]).toMatch(/^\s+decode\s+replicas 0\/1$/);
  });

  it("mid-rollout: each revision's replicas READY of those it has, per group", () => {
    const state = pdService();
    // prefill: its replica 0 of revision 2, replica 1 (starting) of revision 3.
    state.jobs = state.jobs.map((j) => ({ ...j, revision: j.job_num === 2 ? 3 : 2 }));
    expect(serviceSummary(state)?.groups[1]?.revisions).toEqual([
      { revision: 2, ready: 1, replicas: 1 },
      { revision: 3, ready: 0, replicas: 1 },
    ]);
    expect(renderPsTable([summaryOf(state)], plain, now)[4]).toMatch(/^\s+prefill\s+replicas 1\/2 \(1\.\.3\); rev 2: 1\/1, rev 3: 0\/1$/);
  });

  it('says so while no gateway has its endpoint yet, and nothing of it once it has ended', () => {
    const starting = pdService();
    if (starting.service) starting.service.endpoints = [];
    expect(renderPsTable([summaryOf(starting)], plain, now)[1]).toMatch(/^ pd\s+service, deployment=2\s+RUNNING\s+local\s+1 min ago\s+no endpoint yet$/);
    const ended = { ...starting, status: 'TERMINATED' as const, termination_reason: 'STOPPED_BY_USER' as const, finished_at: t0 };
    expect(renderPsTable([summaryOf(ended)], plain, now)[1]).toMatch(/^ pd\s+service, deployment=2\s+TERMINATED\s+local\s+1 min ago\s+STOPPED_BY_USER$/);
  });

  it('shows every endpoint of a service served by two gateways', () => {
    const state = pdService();
    if (state.service) state.service.endpoints = ['http://10.0.0.1:8080/services/pd/', 'http://10.0.0.2:8080/services/pd/'];
    expect(renderPsTable([summaryOf(state)], plain, now)[1]).toMatch(/\s+http:\/\/10\.0\.0\.1:8080\/services\/pd\/, http:\/\/10\.0\.0\.2:8080\/services\/pd\/$/);
  });

  it('leaves a task as it was: its groups\' sizes, then its jobs, no replica rows', () => {
    const lines = renderPsTable([summaryOf(pdRunning())], plain, now);
    expect(serviceSummary(pdRunning())).toBeNull();
    expect(lines[1]).toMatch(/^ pd\s+router×1, prefill×2, decode×1\s+RUNNING\s+local\s+1 min ago$/);
    expect(lines[2]).toMatch(/^\s+0\s+router\s+0\s+RUNNING\s+local\s+127\.0\.0\.2$/);
    expect(lines.some((line) => line.includes('replicas'))).toBe(false);
    expect(lines).toHaveLength(6);
  });
});
