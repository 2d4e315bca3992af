import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { troupeWorkflowBundle } from '../helpers/troupe-worker';

/**
 * Saved histories of real runs, replayed against today's workflow code: a change that would break
 * executions already running (non-determinism) fails here. Record new ones with
 * scripts/record-histories.ts when a change is versioned with patched().
 */
const dir = fileURLToPath(new URL('../histories/', import.meta.url));
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();

describe('replay of saved histories', () => {
  it('has histories to replay', () => {
    expect(files.length).toBeGreaterThanOrEqual(8);
  });

  for (const file of files) {
    it(`replays ${file}`, async () => {
      const saved = JSON.parse(readFileSync(`${dir}${file}`, 'utf8')) as { workflow_id: string; history: unknown };
      const history = historyFromJSON(saved.history);
      await Worker.runReplayHistory({ workflowBundle: await troupeWorkflowBundle() }, history, saved.workflow_id);
    });
  }
});
