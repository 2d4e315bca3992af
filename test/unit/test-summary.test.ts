import { describe, expect, it } from 'vitest';
import { summarize, summaryLine } from '../../scripts/summary-reporter';

describe("the test command's closing line", () => {
  it('counts an expected failure as a known failure, not a pass, and keeps "N passed, N failed" first', () => {
    const summary = summarize(
      [
        { state: 'passed', fails: false },
        { state: 'passed', fails: false },
        { state: 'passed', fails: true },
        { state: 'failed', fails: true },
        { state: 'skipped', fails: false },
      ],
      1,
    );
    expect(summary).toEqual({ passed: 2, failed: 2, known_failures: 1, skipped: 1 });
    expect(summaryLine(summary)).toBe('2 passed, 2 failed, 1 known failure, 1 skipped');
    expect(summaryLine({ passed: 828, failed: 0, known_failures: 9, skipped: 0 })).toMatch(/^828 passed, 0 failed, 9 known failures/);
  });
});
