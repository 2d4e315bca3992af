import type { Range } from './resources-schema';
import { parseMemory, ScalarError, toInt } from './scalars';
import { describeValue } from './yaml-source';

/**
 * dstack's ranges: `4` (exactly 4), `2..8`, `2..` (at least 2), `..8` (at most 8), or a mapping
 * with `min` and/or `max`. Spaces are ignored. `null` on a side means unbounded.
 */
export function parseRange(
  value: unknown,
  endpoint: (v: unknown) => number | undefined,
  unit: string,
  limit: number,
  limitUnit: string,
): Range {
  let min: unknown;
  let max: unknown;
  if (typeof value === 'string' && value.includes('..')) {
    const parts = value.replaceAll(' ', '').split('..');
    if (parts.length !== 2) throw new ScalarError(`"${value}" is not a range: write min..max, min.. or ..max`);
    min = parts[0] === '' ? null : parts[0];
    max = parts[1] === '' ? null : parts[1];
  } else if (typeof value === 'string' || typeof value === 'number') {
    min = value;
    max = value;
  } else if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const keys = Object.keys(value);
    const extra = keys.find((k) => k !== 'min' && k !== 'max');
    if (extra !== undefined) throw new ScalarError(`unknown field \`${extra}\` in a range: only \`min\` and \`max\``, [extra], 'key');
    const obj = value as { min?: unknown; max?: unknown };
    min = obj.min ?? null;
    max = obj.max ?? null;
  } else {
    throw new ScalarError(`expected ${unit} or a range such as 2..8, got ${describeValue(value)}`);
  }
  const side = (v: unknown): number | null => {
    if (v === null) return null;
    const n = endpoint(v);
    if (n === undefined) throw new ScalarError(`expected ${unit} or a range such as 2..8, got ${describeValue(value)}`);
    return bounded(v, n, limit, limitUnit);
  };
  const range = { min: side(min), max: side(max) };
  if (range.min === null && range.max === null) throw new ScalarError('empty range "..": give a minimum, a maximum or both');
  if (range.min !== null && range.max !== null && range.min > range.max) {
    throw new ScalarError(`range ${range.min}..${range.max} has its minimum above its maximum`);
  }
  return range;
}

/** Bounds far past any machine, so that a typo is refused rather than planned (`99999999TB`). */
export const MAX_COUNT = 1_000_000;
export const MAX_SIZE_GB = 1024 ** 3; // 1 EB

export const parseCountRange = (value: unknown): Range => parseRange(value, toInt, 'a whole number', MAX_COUNT, '');
export const SIZE_LIMIT_UNIT = ' GB (1 EB)';
export const parseMemoryRange = (value: unknown): Range => parseRange(value, parseMemory, 'a size such as 8GB', MAX_SIZE_GB, SIZE_LIMIT_UNIT);

/** A count or size between 0 and `limit`; `-0` reads as 0 (kept as -0 it would not survive JSON). */
export function bounded(v: unknown, n: number, limit: number, limitUnit: string): number {
  if (n < 0) throw new ScalarError(`${shown(v)} is negative: counts and sizes are 0 or more`);
  if (n > limit) throw new ScalarError(`${shown(v)} is beyond any machine: at most ${limit.toLocaleString('en-US')}${limitUnit}`);
  return n === 0 ? 0 : n;
}

function shown(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v) : String(v);
}
