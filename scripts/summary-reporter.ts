import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Reporter, TestModule } from 'vitest/node';

/**
 * Counts what the run did for the test command's closing line: an expected failure (`it.fails`)
 * that failed as expected is a known failure, not a pass (vitest's JSON report counts it passed).
 */
export interface TestSummary {
  passed: number;
  failed: number;
  known_failures: number;
  skipped: number;
}

export interface CaseOutcome {
  state: 'passed' | 'failed' | 'skipped' | 'pending';
  fails: boolean;
}

export function summarize(cases: Iterable<CaseOutcome>, erroredModules = 0): TestSummary {
  const summary: TestSummary = { passed: 0, failed: erroredModules, known_failures: 0, skipped: 0 };
  for (const { state, fails } of cases) {
    if (state === 'failed') summary.failed += 1;
    else if (state === 'passed') summary[fails ? 'known_failures' : 'passed'] += 1;
    else summary.skipped += 1;
  }
  return summary;
}

/** `828 passed, 0 failed, 9 known failures, 0 skipped`: 'N passed, N failed' first, as CI reads it. */
export function summaryLine({ passed, failed, known_failures, skipped }: TestSummary): string {
  return `${passed} passed, ${failed} failed, ${known_failures} known failure${known_failures === 1 ? '' : 's'}, ${skipped} skipped`;
}

/** Writes the summary to TROUPE_TEST_SUMMARY (default artifacts/summary.json) when the run ends. */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const cases = testModules.flatMap((m) => [...m.children.allTests()].map((t) => ({ state: t.result().state, fails: t.options.fails === true })));
    // A module that failed without a failing test (it did not load, or threw outside its tests).
    const errored = testModules.filter((m) => m.state() === 'failed' && ![...m.children.allTests('failed')].length).length;
    const file = process.env.TROUPE_TEST_SUMMARY ?? 'artifacts/summary.json';
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, `${JSON.stringify(summarize(cases, errored))}\n`);
  }
}
