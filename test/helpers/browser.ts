import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Locator, type Page, type Request } from 'playwright-core';
import { projectRoot } from '../../src/devserver/dev-server';

/**
 * The Temporal Web UI driven by Debian's headless Chromium (playwright-core, no browser download).
 * The UI is a single-page app: every step waits for the content it needs, never for a fixed time.
 */

const chromiumPath = process.env.TROUPE_CHROMIUM ?? '/usr/bin/chromium';

/** Generous: a busy 2-core machine renders the UI slowly. */
const STEP_TIMEOUT_MS = 60_000;

/**
 * Chromium aborts requests with ERR_NETWORK_CHANGED whenever interfaces come and go on the
 * machine (tests create network namespaces); the single-page app then misses a chunk or a call.
 */
const MAX_ATTEMPTS = 8;

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(chromiumPath)) {
    throw new Error(`no Chromium at ${chromiumPath}: run \`bash scripts/setup.sh --test\` (installs Debian's chromium)`);
  }
  return await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
}

/** Screenshots kept as artifacts of the test run (artifacts/ is not committed). */
export function screenshotDir(name: string): string {
  const dir = join(projectRoot, 'artifacts', name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** The Web UI of one namespace, in one browser tab (replaced by a fresh one after a transient failure). */
export class TemporalUi {
  private currentPage: Page;

  private constructor(
    private readonly browser: Browser,
    first: Page,
    readonly baseUrl: string,
    readonly namespace: string,
    private readonly failureDir: string | null,
  ) {
    this.currentPage = first;
  }

  /** `failureDir`: where a failed step leaves a screenshot of the page. */
  static async open(
    browser: Browser,
    baseUrl: string,
    options: { namespace?: string; failureDir?: string } = {},
  ): Promise<TemporalUi> {
    const ui = new TemporalUi(
      browser,
      await TemporalUi.newTab(browser),
      baseUrl.replace(/\/+$/, ''),
      options.namespace ?? 'default',
      options.failureDir ?? null,
    );
    return ui;
  }

  private static async newTab(browser: Browser): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1600, height: 1600 } });
    page.setDefaultTimeout(STEP_TIMEOUT_MS);
    return page;
  }

  get page(): Page {
    return this.currentPage;
  }

  workflowsUrl(query: string): string {
    return `${this.baseUrl}/namespaces/${encodeURIComponent(this.namespace)}/workflows?query=${encodeURIComponent(query)}`;
  }

  /**
   * Runs one step. A transient failure (a request aborted by a network change, the UI's error
   * page) cuts the attempt short: the tab is closed (which also ends the attempt's pending waits),
   * and after a short back-off a fresh tab loads `retryFrom` (default: the page the step started
   * on) and tries again. Any other failure, or the last attempt's, is final.
   */
  async step<T>(what: string, body: () => Promise<T>, retryFrom?: string): Promise<T> {
    const from = retryFrom ?? this.page.url();
    for (let attempt = 1; ; attempt++) {
      const last = attempt === MAX_ATTEMPTS;
      const page = this.page;
      const watch = watchTransientFailures(page);
      try {
        const run = (async () => {
          if (attempt > 1) await page.goto(from);
          return await body();
        })();
        run.catch(() => undefined);
        return await (last ? run : Promise.race([run, watch.failed]));
      } catch (err) {
        const transient = watch.seen() || (await errorPageShown(page));
        if (!transient || last) {
          await this.keepFailureScreenshot(what);
          const reason = err instanceof Error ? err.message.split('\n')[0] : String(err);
          throw new Error(`Web UI, ${what}: ${reason}${transient ? ` (after ${attempt} attempts with network errors)` : ''}`, {
            cause: err,
          });
        }
        console.warn(`Web UI, ${what}: network changed during attempt ${attempt}, trying again in a fresh tab`);
        await page.close().catch(() => undefined);
        // Network changes come in bursts: let one pass before the next attempt.
        await new Promise((r) => setTimeout(r, Math.min(500 * 2 ** (attempt - 1), 4_000)));
        this.currentPage = await TemporalUi.newTab(this.browser);
      } finally {
        watch.dispose();
      }
    }
  }

  /** What the page showed when a step failed, beside the other screenshots. */
  private async keepFailureScreenshot(what: string): Promise<void> {
    if (this.failureDir === null) return;
    const name = `failed-${what.replace(/[^\w-]+/g, '_').slice(0, 80)}.png`;
    await this.page.screenshot({ path: join(this.failureDir, name), fullPage: true }).catch(() => undefined);
  }

  /** The workflow list filtered by a visibility query; returns the workflow ids it shows. */
  async listWorkflows(query: string): Promise<string[]> {
    const url = this.workflowsUrl(query);
    return await this.step(
      `workflow list for ${query}`,
      async () => {
        await this.page.goto(url);
        const rows = this.page.getByTestId('workflows-summary-configurable-table-row');
        const none = this.page.getByText('No Workflows Found');
        await rows.first().or(none).first().waitFor();
        if (await none.isVisible()) return [];
        return await this.workflowLinks(rows);
      },
      url,
    );
  }

  /** Clicks a link to a workflow (in the list, a child in the tree, the parent) and waits for its page. */
  async openWorkflowLink(workflowId: string): Promise<void> {
    await this.step(`open ${workflowId}`, async () => {
      await this.page.getByRole('link', { name: workflowId, exact: true }).first().click();
      await this.waitForWorkflowPage(workflowId);
    });
  }

  /**
   * Workflow ids linked from within `scope`: links to a workflow page whose text is that
   * workflow's id (run-id and type links are left out).
   */
  async workflowLinks(scope: Locator = this.page.locator('body')): Promise<string[]> {
    const ids = await scope.evaluateAll((elements) =>
      elements.flatMap((element) =>
        [...element.querySelectorAll('a')].flatMap((a) => {
          const match = /\/workflows\/([^/?]+)\/[^/?]+/.exec(a.getAttribute('href') ?? '');
          const text = a.textContent?.trim() ?? '';
          return match?.[1] !== undefined && decodeURIComponent(match[1]) === text ? [text] : [];
        }),
      ),
    );
    return [...new Set(ids)];
  }

  /** Loads a workflow's page by its address (a workflow not linked from where the test is). */
  async openWorkflow(workflowId: string): Promise<void> {
    const url = `${this.baseUrl}/namespaces/${encodeURIComponent(this.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
    await this.step(`open ${workflowId}`, async () => {
      await this.page.goto(url);
      await this.waitForWorkflowPage(workflowId);
    }, url);
  }

  async waitForWorkflowPage(workflowId: string): Promise<void> {
    // The heading's copy button is named after exactly this id (a child's id contains its parent's).
    await this.page.getByTestId('workflow-id-heading').getByRole('button', { name: `Copy ${workflowId}`, exact: true }).waitFor();
    await this.page.getByRole('tab', { name: /Event History/ }).waitFor();
  }

  /** Opens a tab of the workflow page ("Relationships", "Queries", …). */
  async openTab(name: string, ready: (page: Page) => Locator): Promise<void> {
    await this.step(`tab ${name}`, async () => {
      await this.page.getByRole('tab', { name: new RegExp(`^${name}`) }).click();
      await ready(this.page).first().waitFor();
    });
  }

  /** Event History tab: the compact view, one row per activity, signal or child (with its type and result). */
  async compactHistory(): Promise<void> {
    await this.step('compact event history', async () => {
      await this.page.getByText('Compact', { exact: true }).click();
      await this.page.getByText('Activity Type', { exact: true }).first().waitFor();
    });
  }

  /** Waits until the page shows each text: a string exactly, a RegExp as a match of a whole element's text. */
  async shows(what: string, texts: Array<string | RegExp>): Promise<void> {
    await this.step(`${what} showing ${texts.join(', ')}`, async () => {
      for (const text of texts) {
        await (typeof text === 'string' ? this.page.getByText(text, { exact: true }) : this.page.getByText(text)).first().waitFor();
      }
    });
  }

  /** Queries tab: picks the query type (listed once the worker has answered), runs it, returns the JSON shown. */
  async runQuery(queryType: string, expected: string): Promise<string> {
    return await this.step(`query ${queryType}`, async () => {
      const option = this.page.getByRole('option', { includeHidden: true }).filter({ has: this.page.getByText(queryType, { exact: true }) });
      await option.first().waitFor({ state: 'attached' });
      if ((await this.page.getByTestId('query-select').inputValue()) !== queryType) {
        await this.page.getByTestId('query-select-button').click();
        await option.first().click();
      }
      await this.page.getByRole('button', { name: /^(Run|Refresh) Query$/ }).click();
      const result = this.page.getByRole('textbox', { name: 'Query Result' }).filter({ hasText: expected });
      await result.waitFor();
      return await result.innerText();
    });
  }

  /** User Metadata tab: the workflow's summary, rendered by the UI in a frame of its own. */
  async summaryText(expected: string): Promise<string> {
    return await this.step('user metadata summary', async () => {
      const summary = this.page.frameLocator('#user-metadata-summary').getByText(expected);
      await summary.waitFor();
      return await summary.innerText();
    });
  }

  async screenshot(dir: string, name: string): Promise<string> {
    const path = join(dir, `${name}.png`);
    await this.page.screenshot({ path, fullPage: true });
    return path;
  }
}

/** A timeline label: an activity with a summary is labelled `type • summary`. */
export function timelineLabel(label: string): RegExp {
  return new RegExp(`^${label.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}( • .+)?$`);
}

/** Rejects `failed` on the first request Chromium aborts because the network changed. */
function watchTransientFailures(page: Page): { failed: Promise<never>; seen: () => boolean; dispose: () => void } {
  let seen = false;
  let reject: (err: Error) => void = () => undefined;
  const failed = new Promise<never>((_, r) => (reject = r));
  failed.catch(() => undefined);
  const listener = (request: Request) => {
    const error = request.failure()?.errorText ?? '';
    if (!error.includes('ERR_NETWORK_CHANGED')) return;
    seen = true;
    reject(new Error(`${request.url()}: ${error}`));
  };
  page.on('requestfailed', listener);
  return { failed, seen: () => seen, dispose: () => page.off('requestfailed', listener) };
}

async function errorPageShown(page: Page): Promise<boolean> {
  return await page.getByText("Uh oh. There's an error.").isVisible().catch(() => false);
}
