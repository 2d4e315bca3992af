import type { Range } from './resources-schema';
import { parseMemory, ScalarError, toInt } from './scalars';
import { describeValue } from './yaml-source';

/**
 * dstack's ranges: `4` (exactly 4), `2..8`, `2..` (at least 2), `..8` (at most 8), or a mapping
 * with `min` and/or `max`. Spaces are ignored. `null` on a side means unbounded.
 */
export function parseRange(value: unknown, endpoint: (v: unknown) => number | undefined, unit: string): Range {
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
    return n;
  };
  const range = { min: side(min), max: side(max) };
  if (range.min === null && range.max === null) throw new ScalarError('empty range "..": give a minimum, a maximum or both');
  if (range.min !== null && range.max !== null && range.min > range.max) {
    throw new ScalarError(`range ${range.min}..${range.max} has its minimum above its maximum`);
  }
  return range;
}

export const parseCountRange = (value: unknown): Range => parseRange(value, toInt, 'a whole number');
export const parseMemoryRange = (value: unknown): Range => parseRange(value, parseMemory, 'a size such as 8GB');
