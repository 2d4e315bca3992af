import { ScalarError, toInt } from './scalars';
import { describeValue } from './yaml-source';

/**
 * Durations as dstack writes them: whole seconds (`90`) or a number with one unit, `30s`, `5m`,
 * `1h`, `2d`, `1w`. A fractional number of seconds is truncated, as dstack does.
 */
const unitSeconds: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400, w: 604_800 };

/** Ten years: more than any run or retry window, and far below where seconds stop being exact. */
const MAX_DURATION_S = 10 * 365 * 86_400;

export function parseDuration(value: unknown): number {
  const seconds = durationSeconds(value);
  if (Math.abs(seconds) > MAX_DURATION_S) {
    throw new ScalarError(`a duration of at most 10 years (${MAX_DURATION_S}s) is allowed, got ${describeValue(value)}`);
  }
  return seconds;
}

function durationSeconds(value: unknown): number {
  // `+ 0` turns the -0 that truncating a tiny negative number gives into 0 (JSON has no -0).
  if (typeof value === 'number' && Number.isFinite(value)) return Math.trunc(value) + 0;
  if (typeof value === 'string') {
    const seconds = toInt(value);
    if (seconds !== undefined) return seconds;
    const match = /^(\d+) *([smhdw])$/.exec(value);
    if (match) return Number(match[1]) * (unitSeconds[match[2] ?? 's'] ?? 1);
    if (/^\s*[-+]?\d+\s*$/.test(value)) return Number(value);
  }
  throw new ScalarError(`expected a duration such as 90 (seconds), 30s, 5m, 1h, 2d or 1w, got ${describeValue(value)}`);
}

/**
 * A duration that can be switched off: `off` (or `false`) → 'off'; unset, `null` or `true` → null
 * (the default); otherwise seconds, never negative.
 */
export function parseOffableDuration(value: unknown): number | 'off' | null {
  if (value === 'off' || value === false) return 'off';
  if (value === true || value === null || value === undefined) return null;
  const seconds = parseDuration(value);
  if (seconds < 0) throw new ScalarError(`a duration cannot be negative, got ${describeValue(value)}`);
  return seconds;
}
