import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { DeterminismViolationError } from '@temporalio/workflow';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { troupeWorkflowBundle } from '../helpers/troupe-worker';
import { metricsSinks } from '../../src/worker/metrics-sinks';
import { workerMetrics } from '../../src/metrics/troupe-metrics';

/**
 * Saved histories of real runs (one per behaviour whose command sequence must not change under a
 * running execution), replayed against today's workflow code: a change that would break executions
 * already running (non-determinism) fails here. Record them with scripts/record-histories.ts; the
 * rule for when (README, Development): from the first tagged release such a change is a patch.
 */
const dir = fileURLToPath(new URL('../histories/', import.meta.url));
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();

/** What scripts/record-histories.ts records; a hand-over's second execution is `…-adopted`. */
const EXPECTED_SCENARIOS = [
  'depends-on',
  'heal-restart-resize',
  'heal-restart-resize-adopted',
  'large-paged',
  'retry-then-fail',
  'ssh-fleet-lease',
  'stopped-by-user',
  'unlock-group-provisioning-workers-first',
  'unlock-one-by-one-master-first',
];

/** The fleet's: hosts added, re-detected and removed; a host held by a run while the fleet continued as new (its last execution, `-adopted`). */
const EXPECTED_FLEET_SCENARIOS = ['fleet-hosts-changed', 'fleet-lease-handover', 'fleet-lease-handover-adopted'];

interface SavedHistory {
  workflow_id: string;
  history: { events: Array<Record<string, unknown>> };
}

function load(file: string): SavedHistory {
  return JSON.parse(readFileSync(`${dir}${file}`, 'utf8')) as SavedHistory;
}

async function replay(saved: SavedHistory): Promise<void> {
  // With the worker's sinks, as a real worker has them (not called during replay): without them every replayed run logs "unregistered external sink".
  await Worker.runReplayHistory({ workflowBundle: await troupeWorkflowBundle(), sinks: metricsSinks(workerMetrics) }, historyFromJSON(saved.history), saved.workflow_id);
}

describe('replay of saved histories', () => {
  it('has a run and a group history for each behaviour scripts/record-histories.ts records, and the fleet\'s, by name', () => {
    // A scenario missing (not recorded again after a change) fails here, not only fewer files.
    const scenarios = (suffix: string) => [...new Set(files.filter((f) => f.endsWith(suffix)).map((f) => f.slice(11, -suffix.length)))].sort();
    expect(scenarios('.run.json')).toEqual(EXPECTED_SCENARIOS);
    expect(scenarios('.group.json')).toEqual(EXPECTED_SCENARIOS);
    expect(scenarios('.fleet.json')).toEqual(EXPECTED_FLEET_SCENARIOS);
  });

  for (const file of files) {
    it(`replays ${file}`, async () => {
      await replay(load(file));
    });
  }

  it('fails a history whose commands the code no longer issues (the check itself)', async () => {
    // The history of a workflow that once scheduled another activity than today's code does at
    // that point: what a change to the command sequence without a patch looks like to replay.
    const file = files.find((f) => f.endsWith('stopped-by-user.run.json'));
    if (!file) throw new Error('no stopped-by-user history');
    const saved = load(file);
    const scheduled = saved.history.events.find((e) => 'activityTaskScheduledEventAttributes' in e);
    const attributes = scheduled?.activityTaskScheduledEventAttributes as { activityType: { name: string } } | undefined;
    if (!attributes) throw new Error(`${file}: no scheduled activity`);
    expect(attributes.activityType.name).toBe('stopJobs');
    attributes.activityType.name = 'stopJobsTheOldWay';
    await expect(replay(saved)).rejects.toBeInstanceOf(DeterminismViolationError);
  });
});
