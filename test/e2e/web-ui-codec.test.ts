import { randomBytes } from 'node:crypto';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { LocalBackend } from '../../src/backends/local/local-backend';
import { TroupeClient } from '../../src/client';
import { loadCodecKeyring } from '../../src/codec/codec-keys';
import { EncryptionCodec } from '../../src/codec/payload-codec';
import { launchChromium, screenshotDir, TemporalUi } from '../helpers/browser';
import { historiesText } from '../helpers/history-text';
import { makeLocalFleet } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { testClient } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';

/**
 * The Web UI shows decoded values through `troupe codec-server` (the test dev server's UI is
 * started with --ui-codec-endpoint, see test/global-setup.ts): a job prints a canary, `troupe logs`
 * reads it through a workflow whose result is stored encrypted, and that workflow's page in
 * headless Chromium shows the canary in clear.
 */

const fleet = makeLocalFleet('troupe-web-ui-codec-');
const backend = new LocalBackend({ stateDir: fleet.stateDir, network: 'loopback' });
const [a, b] = [randomBytes(8).toString('hex'), randomBytes(8).toString('hex')];
const printed = `UICANARY${a}${b}`;
const runName = `webui-codec-${a.slice(0, 8)}`;

let client: Awaited<ReturnType<typeof testClient>>;
let worker: Awaited<ReturnType<typeof startTroupeWorker>>;
let browser: Browser | undefined;

beforeAll(async () => {
  client = await testClient();
  worker = await startTroupeWorker({ local: backend });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await worker?.stop();
  await client?.close();
  fleet.remove();
});

describe('the Web UI through the codec server', () => {
  it('shows the log a job printed, stored encrypted, decoded on the read-log workflow page', async () => {
    const troupe = new TroupeClient(client.client, { taskQueue: worker.taskQueue });
    const plan = makePlan(runName, [{ name: 'talk', nodes: 1, commands: [`printf 'UICANARY%s%s\\n' ${a} ${b}`] }]);
    const run = await troupe.submit({ plan, backend: 'local', options: { stop_grace_s: 1 }, checkWorkers: false });
    expect((await run.wait()).status).toBe('DONE');
    expect((await run.readLog(0)).data).toContain(printed);

    const logIds: string[] = [];
    for await (const info of client.client.workflow.list({ query: `WorkflowId STARTS_WITH "${run.workflowId}/log/"` })) logIds.push(info.workflowId);
    expect(logIds).toHaveLength(1);
    const logId = logIds[0] as string;
    // Stored encrypted: the canary is not in the history as the server keeps it, only after decoding.
    expect((await historiesText(client.client, logId, null)).text).not.toContain(printed);
    expect((await historiesText(client.client, logId, new EncryptionCodec(loadCodecKeyring({ create: false }), { unencrypted: 'pass' }))).text).toContain(printed);

    const shots = screenshotDir('web-ui-codec');
    const ui = await TemporalUi.open(browser as Browser, inject('temporalUiAddress'), { failureDir: shots });
    await ui.openWorkflow(logId);
    await ui.step('decoded log result', async () => {
      await ui.page.getByText(printed).first().waitFor();
    });
    await ui.screenshot(shots, '01-log-result-decoded');
    expect(await ui.page.locator('body').innerText()).toContain(printed);
  }, 240_000);
});
