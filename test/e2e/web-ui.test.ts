import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { LocalBackend } from '../../src/backends/local/local-backend';
import { TroupeClient } from '../../src/client';
import { runSummaryLine } from '../../src/client/run-memo';
import { runWorkflowId } from '../../src/contract/ids';
import { launchChromium, screenshotDir, TemporalUi, timelineLabel } from '../helpers/browser';
import { makeLocalFleet } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { testClient } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';

/**
 * The Temporal Web UI as the run's dashboard: a real PD run on the local fleet, then the dev
 * server's UI in headless Chromium, the way a user finds it: the list filtered by Troupe's search
 * attributes, the run, its three group children and their activities, its state from the query
 * tab and its summary. Screenshots are kept in artifacts/web-ui/.
 */

const fleet = makeLocalFleet('troupe-web-ui-');
// Loopback addresses: no interface comes or goes, which would abort Chromium's requests.
const backend = new LocalBackend({ stateDir: fleet.stateDir, network: 'loopback' });
const groups = ['router', 'prefill', 'decode'];
const runName = `webui-pd-${randomUUID().slice(0, 8)}`;
const runId = runWorkflowId(runName);
const groupIds = groups.map((group) => `${runId}/group/${group}`);
const plan = makePlan(runName, [
  { name: 'router', nodes: 1, commands: ['echo "router on $DSTACK_MASTER_NODE_IP"', 'sleep 0.5'] },
  { name: 'prefill', nodes: 1, commands: ['echo "prefill rank $DSTACK_NODE_RANK of $DSTACK_NODES_NUM"', 'sleep 0.5'] },
  { name: 'decode', nodes: 1, commands: ['echo "decode rank $DSTACK_NODE_RANK of $DSTACK_NODES_NUM"', 'sleep 0.5'] },
]);
const groupActivities = ['provisionJobs', 'waitRunnersReady', 'runJobs'];

let client: Client;
let closeClient: () => Promise<void>;
let worker: Awaited<ReturnType<typeof startTroupeWorker>>;
let browser: Browser | undefined;
let ui: TemporalUi;
let shots: string;

beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
  // The worker stays up while the browser runs: the UI's query tab needs it to answer.
  worker = await startTroupeWorker({ local: backend });
  browser = await launchChromium();
  shots = screenshotDir('web-ui');
  ui = await TemporalUi.open(browser, inject('temporalUiAddress'), { failureDir: shots });
});
afterAll(async () => {
  await browser?.close();
  await worker?.stop();
  await closeClient?.();
  fleet.remove();
});

/** Waits until visibility lists exactly `expected` for the query (it lags a finished run a little). */
async function visibleIds(query: string, expected: number): Promise<string[]> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const ids: string[] = [];
    for await (const info of client.workflow.list({ query })) ids.push(info.workflowId);
    if (ids.length >= expected || Date.now() > deadline) return ids;
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** On the run's Relationships tab: waits for a link to each group child; returns every child linked. */
async function groupChildrenShown(names: string[], timeoutMs?: number): Promise<string[]> {
  for (const name of names) {
    await ui.page.getByRole('link', { name: `${runId}/group/${name}`, exact: true }).first().waitFor(timeoutMs ? { timeout: timeoutMs } : {});
  }
  return (await ui.workflowLinks()).filter((id) => id.startsWith(`${runId}/group/`)).sort();
}

describe('the Web UI as the run dashboard', () => {
  it('lists a finished PD run by its search attributes, with its three groups, their activities and its state', async () => {
    const troupe = new TroupeClient(client, { taskQueue: worker.taskQueue });
    // The worker was started just now and may not have polled yet; the presence check is not under test here.
    const run = await troupe.submit({ plan, backend: 'local', options: { stop_grace_s: 2 }, checkWorkers: false });
    const final = await run.wait();
    expect(final.status).toBe('DONE');
    expect(final.termination_reason).toBe('ALL_JOBS_DONE');

    const query = `TroupeRunStatus="DONE" AND TroupeRunName="${runName}"`;
    expect(await visibleIds(query, 1)).toEqual([runId]);

    // 1. The list, filtered the way the README tells users to: exactly this run.
    expect(await ui.listWorkflows(query)).toEqual([runId]);
    await ui.screenshot(shots, '01-runs-filtered-by-status');

    // 2. The run, on its timeline: each group child under its summary, and the release of its nodes.
    await ui.openWorkflowLink(runId);
    await ui.openTab('Timeline', (page) => page.getByText(timelineLabel('releaseRun')));
    await ui.shows('run timeline', groups.map((group) => new RegExp(`^group ${group}: `)));
    await ui.screenshot(shots, '02-run-timeline');

    // 3. Its children: one NodeGroupWorkflow per group, no more.
    const relationships = () => ui.openTab('Relationships', (page) => page.getByRole('link', { name: groupIds[0], exact: true }));
    await relationships();
    expect(await groupChildrenShown(groups)).toEqual([...groupIds].sort());
    await ui.screenshot(shots, '03-run-groups');

    // 4. Each group's page: its timeline, then its history in the compact view (one row per
    // activity, with its summary) where every activity is checked (the timeline folds short steps
    // into idle time), then back to the run by the parent link.
    for (const [i, group] of groups.entries()) {
      await ui.openWorkflowLink(groupIds[i]!);
      // The UI reopens the tab last used, so the tab is chosen explicitly.
      await ui.openTab('Timeline', (page) => page.getByText(timelineLabel('runJobs')));
      await ui.screenshot(shots, `04-group-${group}-timeline`);
      await ui.openTab('Event History', (page) => page.getByText('Compact', { exact: true }));
      await ui.compactHistory();
      await ui.shows(`${group} event history`, [...groupActivities, new RegExp(`^provision ${group}/0\\b`), new RegExp(`^run ${group}/0 on `)]);
      await ui.screenshot(shots, `04-group-${group}-history`);
      await ui.openWorkflowLink(runId);
      await relationships();
    }

    // 5. The run's state, answered by the worker through the Queries tab.
    await ui.openTab('Queries', (page) => page.getByRole('button', { name: /^(Run|Refresh) Query$/ }));
    const state = await ui.runQuery('runState', '"termination_reason": "ALL_JOBS_DONE"');
    expect(state).toContain(`"run_name": "${runName}"`);
    expect(state).toContain('"status": "DONE"');
    await ui.screenshot(shots, '05-run-state-query');

    // 6. Its summary line (set at start) on the User Metadata tab.
    await ui.openTab('User Metadata', (page) => page.locator('#user-metadata-summary'));
    expect(await ui.summaryText(runSummaryLine(plan, 'local'))).toBe(runSummaryLine(plan, 'local'));
    await ui.screenshot(shots, '06-run-summary');
  }, 300_000);

  it('the same checks fail for a run or a group that is not there', async () => {
    expect(await ui.listWorkflows(`TroupeRunName="${runName}-missing"`)).toEqual([]);
    expect(await ui.listWorkflows(`TroupeRunStatus="RUNNING" AND TroupeRunName="${runName}"`)).toEqual([]);
    await ui.listWorkflows(`TroupeRunName="${runName}"`);
    await ui.openWorkflowLink(runId);
    await ui.openTab('Relationships', (page) => page.getByRole('link', { name: groupIds[0], exact: true }));
    await expect(groupChildrenShown([...groups, 'ghost'], 5_000)).rejects.toThrow(/group\/ghost/);
  }, 180_000);
});
