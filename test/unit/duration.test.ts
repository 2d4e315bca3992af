import { describe, expect, it } from 'vitest';
import { parseDuration, parseOffableDuration } from '../../src/config/duration';
import { toInt } from '../../src/config/scalars';

describe('durations', () => {
  it('truncates fractions as dstack does', () => {
    expect(parseDuration(90.9)).toBe(90);
    expect(parseDuration('5m')).toBe(300);
    expect(parseDuration(-1.5)).toBe(-1);
  });

  // Found by the service fuzz: `scale_up_delay: -1.04e-322` planned as -0, which JSON writes as 0.
  it('never gives -0 (a plan must survive JSON unchanged)', () => {
    for (const tiny of [-1.04e-322, -0.4, -0]) {
      expect(Object.is(parseDuration(tiny), 0)).toBe(true);
      expect(Object.is(parseOffableDuration(tiny), 0)).toBe(true);
    }
  });

  it("reads YAML's -0 as 0", () => {
    expect(Object.is(toInt(-0), 0)).toBe(true);
    expect(Object.is(toInt('-0'), 0)).toBe(true);
    expect(Object.is(parseDuration('-0'), 0)).toBe(true);
  });
});
