import { describe, expect, it } from 'vitest';
import type { RolloutStatus, RunState, RunSummary } from '../../src/client';
import { serviceSummary } from '../../src/client';
import { CliError } from '../../src/cli/command';
import { parseRolloutArgs } from '../../src/cli/commands/rollout';
import { describeRollbackEnd, describeRollout, rolloutUnderWay } from '../../src/cli/render/rollout-text';
import { renderPsTable } from '../../src/cli/render/run-table';
import { pdService, t0 } from './cli-render-fixtures';

/** What `troupe rollout` and `troupe ps` show of a service's rollout (the run state's service.rollout). */

const canary: RolloutStatus = {
  deployment: 3,
  coherence: 'revision',
  revision: 15,
  from: 12,
  phase: 'canary',
  paused: false,
  canary: { traffic_percent: 20, gate: 'error rate 0.0% (0 of 40), p95 12 ms' },
  error: null,
  can_roll_back: false,
  round: null,
  share_percent: 20,
  held: null,
  synthetic: null,
};

function usageError(args: string[]): { code: number; message: string } {
  try {
    parseRolloutArgs(args);
  } catch (err) {
    if (err instanceof CliError) return { code: err.exitCode, message: err.message.split('\n')[0] ?? '' };
    throw err;
  }
  throw new Error(`accepted: ${args.join(' ')}`);
}

describe('troupe rollout: its arguments', () => {
  it('takes an action and a run name, --json and the connection flags', () => {
    expect(parseRolloutArgs(['status', 'pd'])).toEqual({ action: 'status', run: 'pd', json: false, connection: {} });
    expect(parseRolloutArgs(['rollback', 'pd', '--json', '--namespace', 'ml'])).toEqual({ action: 'rollback', run: 'pd', json: true, connection: { namespace: 'ml' } });
    for (const action of ['pause', 'resume'] as const) expect(parseRolloutArgs([action, 'pd'])?.action).toBe(action);
    expect(parseRolloutArgs(['--help'])).toBeNull();
  });

  it('refuses bad usage with exit 2 before connecting: no action, an unknown one, no run, more, a name that is no run\'s, an unknown flag', () => {
    expect(usageError([])).toEqual({ code: 2, message: 'rollout needs an action (status, pause, resume, rollback) and a run name' });
    expect(usageError(['pd'])).toEqual({ code: 2, message: 'rollout needs an action (status, pause, resume, rollback) and a run name' });
    expect(usageError(['undo', 'pd'])).toEqual({ code: 2, message: 'no rollout action "undo": status, pause, resume, rollback' });
    expect(usageError(['pause', 'pd', 'decode'])).toEqual({ code: 2, message: 'rollout needs an action (status, pause, resume, rollback) and a run name' });
    expect(usageError(['status', 'run/pd'])).toMatchObject({ code: 2, message: expect.stringMatching(/^"run\/pd" is not a run name/) });
    expect(usageError(['status', 'pd', '--force'])).toMatchObject({ code: 2, message: expect.stringMatching(/--force/) });
  });
});

describe('troupe rollout status', () => {
  it('says so when there has been no rollout since the run began', () => {
    expect(describeRollout('pd', null)).toEqual(['pd: no rollout since the run began']);
  });

  it('shows a canary: revisions, its share and the gate\'s last verdict, and that a rollback is possible', () => {
    expect(describeRollout('pd', canary)).toEqual([
      'pd: deployment 3 (coherence: revision)',
      '  revision: 12 → 15',
      '  phase:    canary 20%',
      '  canary:   20% of new requests; gate: error rate 0.0% (0 of 40), p95 12 ms',
      '  rollback: possible: `troupe rollout rollback pd` (the old revision serves throughout)',
    ]);
    expect(describeRollout('pd', { ...canary, canary: { traffic_percent: 20, gate: null }, paused: true })[2]).toBe('  phase:    canary 20%, paused');
    expect(describeRollout('pd', { ...canary, canary: { traffic_percent: 20, gate: null } })[3]).toBe('  canary:   20% of new requests; gate: no verdict yet');
  });

  it('says when a rollback cannot be asked: the old revision being stopped, rolling back already, dstack\'s rolling', () => {
    expect(describeRollout('pd', { ...canary, phase: 'retiring', canary: null }).at(-1)).toBe('  rollback: not now: the old revision is being stopped; once it is over, a rollback deploys it again');
    expect(describeRollout('pd', { ...canary, phase: 'rolling-back' }).at(-1)).toBe('  rollback: rolling back');
    // Held for a decision (rollback: manual): why, and what to do.
    expect(describeRollout('pd', { ...canary, paused: true, held: "the canary's gate failed: error rate 20% (4 of 20)" })[2]).toBe(
      "  phase:    canary 20%, held: the canary's gate failed: error rate 20% (4 of 20) (`troupe rollout rollback` or `resume`)",
    );
    // In rounds: where it is, and a rollback still possible while a round but the last retires old replicas.
    const rounds = { ...canary, canary: null, round: { number: 1, of: 2 }, share_percent: 50 };
    expect(describeRollout('pd', rounds)[2]).toBe('  phase:    round 1 of 2: sharing 50%');
    expect(describeRollout('pd', { ...rounds, canary: { traffic_percent: 10, gate: null }, share_percent: 10 })[2]).toBe('  phase:    round 1 of 2: canary 10%');
    expect(describeRollout('pd', { ...rounds, round: { number: 2, of: 2 }, phase: 'starting' })[2]).toBe('  phase:    round 2 of 2: starting');
    expect(describeRollout('pd', { ...rounds, phase: 'retiring' }).at(-1)).toBe(
      '  rollback: possible: `troupe rollout rollback pd` (the old revision is still current; its retired replicas start again)',
    );
    const independent: RolloutStatus = { ...canary, coherence: 'independent', revision: 3, from: null, phase: 'rolling', canary: null };
    expect(describeRollout('pd', independent)).toEqual([
      'pd: deployment 3 (coherence: independent)',
      '  revision: one pool, old and new replicas side by side (dstack\'s rolling)',
      '  phase:    rolling',
      '  rollback: not possible: it rolls as dstack does (rollout.coherence: independent)',
    ]);
  });

  it('shows one that is over: went through (and can be rolled back), or rolled back and why', () => {
    const through: RolloutStatus = { ...canary, phase: 'over', canary: null, can_roll_back: true };
    expect(describeRollout('pd', through).slice(2)).toEqual([
      '  phase:    over, went through',
      '  rollback: possible: `troupe rollout rollback pd` deploys the spec the last rollout that went through replaced again',
    ]);
    const back: RolloutStatus = { ...canary, phase: 'over', error: 'deployment 3 rolled back: rolled back by hand; revision 12 serves' };
    expect(describeRollout('pd', back).slice(2)).toEqual([
      '  phase:    over, did not go through',
      '  canary:   20% of new requests; gate: error rate 0.0% (0 of 40), p95 12 ms',
      '  error:    deployment 3 rolled back: rolled back by hand; revision 12 serves',
      '  rollback: none to go back to (no rollout with coherence: revision went through)',
    ]);
  });
});

describe('troupe rollout rollback: how it ended', () => {
  it('says the run\'s reason for a rollback of the one under way, and the revision serving for one that deployed the old spec again', () => {
    expect(describeRollbackEnd('pd', { ...canary, phase: 'over', error: 'deployment 3 rolled back: rolled back by hand; revision 12 serves' })).toBe(
      'pd: deployment 3 rolled back: rolled back by hand; revision 12 serves',
    );
    expect(describeRollbackEnd('pd', { ...canary, deployment: 4, revision: 12, from: 15, phase: 'over', canary: null })).toBe('pd: deployment 4 went through; revision 12 serves');
  });
});

describe('troupe ps of a service with a rollout', () => {
  const plain = { color: false };
  const now = new Date(Date.parse(t0) + 75_000);
  function row(rollout: RolloutStatus | null, ended = false): string {
    const state: RunState = pdService();
    if (state.service) state.service.rollout = rollout;
    const run = ended ? { ...state, status: 'TERMINATED' as const, finished_at: t0 } : state;
    const summary: RunSummary = {
      name: run.run_name, workflowId: run.run_id, runId: 'r1', open: !ended, status: run.status, backend: run.backend, groups: run.groups,
      fleet: 'local', startTime: t0, closeTime: run.finished_at, state: run, stateError: null, service: serviceSummary(run),
    };
    return renderPsTable([summary], plain, now, 400)[1] ?? '';
  }

  it('shows the rollout under way on the service row: its phase, a canary\'s share and gate, paused', () => {
    expect(row(canary)).toMatch(/http:\/\/127\.0\.0\.1:8080\/services\/pd\/; rollout 3: canary 20% \(gate: error rate 0\.0% \(0 of 40\), p95 12 ms\)$/);
    expect(row({ ...canary, paused: true })).toMatch(/; rollout 3: canary 20%, paused \(gate: .*\)$/);
    expect(row({ ...canary, phase: 'starting', canary: null })).toMatch(/; rollout 3: starting$/);
    expect(rolloutUnderWay({ ...canary, phase: 'shifting', paused: true })).toBe('rollout 3: shifting, paused');
  });

  it('shows nothing when none is under way, or once the run ended', () => {
    expect(row(null)).toMatch(/services\/pd\/$/);
    expect(row({ ...canary, phase: 'over' })).toMatch(/services\/pd\/$/);
    expect(row(canary, true)).not.toMatch(/rollout/);
  });
});
