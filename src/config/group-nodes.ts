import { MAX_TOTAL_NODES } from '../plan/input-size';
import { MAX_COUNT, parseRange } from './range';
import { ScalarError, toInt } from './scalars';
import { describeValue } from './yaml-source';

/**
 * A group's `nodes:`: a count as dstack takes it (`2`), or Troupe's extension, dstack's range
 * syntax (`1..3`, `{min: 1, max: 3}`): the run starts with MIN nodes and `troupe scale` may resize
 * the group within the bounds, so both are required.
 */
export interface GroupNodes {
  /** Nodes at start (MIN for a range). */
  nodes: number;
  range: { min: number; max: number } | null;
}

export function parseGroupNodes(value: unknown): GroupNodes {
  const isRange = (typeof value === 'string' && value.includes('..')) || (value !== null && typeof value === 'object' && !Array.isArray(value));
  if (!isRange) {
    const n = toInt(value);
    if (n === undefined || n < 1) throw new ScalarError(`expected an integer >= 1, got ${describeValue(value)}`);
    return { nodes: n, range: null };
  }
  const range = parseRange(value, toInt, 'a whole number', MAX_COUNT, '');
  if (range.max === null) throw new ScalarError("a group's nodes range needs a maximum: write MIN..MAX, e.g. 1..3");
  if (range.min === null) throw new ScalarError("a group's nodes range needs a minimum: write MIN..MAX, e.g. 1..3");
  if (range.max > MAX_TOTAL_NODES) throw new ScalarError(`a group's nodes range reaches ${range.max}; a run has at most ${MAX_TOTAL_NODES} nodes`);
  if (range.min < 1) throw new ScalarError(`a group starts with at least 1 node: the range's minimum is ${range.min}`);
  return { nodes: range.min, range: { min: range.min, max: range.max } };
}
