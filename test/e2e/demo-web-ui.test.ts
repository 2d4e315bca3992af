import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium, screenshotDir, TemporalUi } from '../helpers/browser';
import { demoEnv, runDemo } from '../helpers/demo-script';

/**
 * What a new user sees: `npm run demo` (its script, scripts/demo.ts, on ports of its own here),
 * then the link it prints, in a browser. The run's input is shown decoded, with no "Codec Server
 * could not connect" banner: the demo started the codec server beside the dev server.
 */

const scratch = mkdtempSync(join(tmpdir(), 'troupe-demo-ui-'));
let env: NodeJS.ProcessEnv;
let uiAddress: string;
let browser: Browser | undefined;

beforeAll(async () => {
  ({ env, uiAddress } = await demoEnv(scratch));
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await runDemo(env, ['--stop']);
  rmSync(scratch, { recursive: true, force: true });
});

describe('npm run demo, then its Web UI link', () => {
  it("shows the run's input decoded, with no codec error", async () => {
    const run = await runDemo(env);
    expect(run.code, run.output).toBe(0);
    expect(run.output).toContain('codec server for the Web UI at');

    const shots = screenshotDir('demo-web-ui');
    const ui = await TemporalUi.open(browser as Browser, uiAddress, { failureDir: shots });
    await ui.openWorkflow('run/pd-disagg-local');
    await ui.step('decoded input', async () => {
      // MODEL_ID is in the plan's env: readable only once the UI has the input decoded.
      await ui.page.getByText(/meta-llama\/Llama-3\.2-3B-Instruct/).first().waitFor();
    });
    await ui.screenshot(shots, '01-demo-run-input-decoded');
    const body = await ui.page.locator('body').innerText();
    expect(body).not.toMatch(/Codec Server could not connect/i);
    expect(body).not.toContain('binary/encrypted');
  }, 600_000);
});
