import { z } from 'zod';
import { describeValue } from './yaml-source';

/**
 * Scalar fields read the way dstack (pydantic, lax mode) reads them, so a config dstack accepts is
 * accepted here: numbers are taken where a string is expected (`name: 123`), integral numbers and
 * digit strings where an integer is (`nodes: "2"`). Booleans are never taken for numbers or strings.
 */

export const REQUIRED = 'required field is missing';

/** A schema that converts with `convert` and refuses what it returns `undefined` for. */
export function scalar<T>(expected: string, convert: (value: unknown) => T | undefined) {
  return z.unknown().transform((value, ctx): T => {
    const out = convert(value);
    if (out === undefined) {
      ctx.addIssue({ code: 'custom', message: value === undefined ? REQUIRED : `expected ${expected}, got ${describeValue(value)}` });
      return z.NEVER;
    }
    return out;
  });
}

/**
 * A refusal from a value parser; `subpath` points below the value being parsed (an entry of a
 * list), `target` says whether the key or the value of that entry is wrong.
 */
export class ScalarError extends Error {
  constructor(
    message: string,
    readonly subpath: readonly (string | number)[] = [],
    readonly target: 'key' | 'value' = 'value',
  ) {
    super(message);
  }
}

/** Runs `parse` on the field `key` of a mapping, so that its refusal points at that field. */
export function within<T>(key: string | number, parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof ScalarError) throw new ScalarError(err.message, [key, ...err.subpath], err.target);
    throw err;
  }
}

/** A schema running `convert`, which refuses by throwing a ScalarError. */
export function parsed<T>(convert: (value: unknown) => T) {
  return z.unknown().transform((value, ctx): T => {
    try {
      return convert(value);
    } catch (err) {
      if (!(err instanceof ScalarError)) throw err;
      ctx.addIssue({ code: 'custom', message: err.message, path: [...err.subpath], params: { target: err.target } });
      return z.NEVER;
    }
  });
}

export function toText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return undefined;
}

export function toInt(value: unknown): number | undefined {
  // `+ 0` turns -0 (YAML's `-0`) into 0: JSON has no -0, and a plan must survive JSON unchanged.
  if (typeof value === 'number') return Number.isSafeInteger(value) ? value + 0 : undefined;
  if (typeof value === 'string' && /^\s*[-+]?\d+\s*$/.test(value)) {
    const n = Number(value.trim());
    return Number.isSafeInteger(n) ? n + 0 : undefined;
  }
  return undefined;
}

export const textSchema = scalar('a string', toText);

export function intAtLeast(min: number) {
  return scalar(`an integer >= ${min}`, (value) => {
    const n = toInt(value);
    return n !== undefined && n >= min ? n : undefined;
  });
}

export const textListSchema = z.array(textSchema);

/**
 * A decimal number as Python's `float()` reads it (`8`, `1.5`, `1_000`, `2e3`); infinities and NaN
 * are refused.
 */
export function parseDecimal(text: string): number | undefined {
  const t = text.trim();
  if (!/^[-+]?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][-+]?\d(?:_?\d)*)?$/.test(t)) return undefined;
  const n = Number(t.replaceAll('_', ''));
  return Number.isFinite(n) ? n : undefined;
}

/**
 * A memory or disk size in GB, as dstack reads one: a number of GB, or a string with `MB`, `GB`
 * or `TB` (case and spaces ignored); a string without a unit is GB.
 */
export function parseMemory(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined;
  if (typeof value !== 'string') return undefined;
  const text = value.replaceAll(' ', '').toLowerCase();
  const units: [string, number][] = [
    ['tb', 1024],
    ['gb', 1],
    ['mb', 1 / 1024],
  ];
  for (const [unit, factor] of units) {
    if (text.endsWith(unit)) {
      const n = parseDecimal(text.slice(0, -unit.length));
      return n === undefined ? undefined : n * factor;
    }
  }
  return parseDecimal(text);
}

/**
 * Whether the value means yes or no, as pydantic's lax booleans read it (`true`, `"yes"`, `1`…).
 */
export function toBool(value: unknown): boolean | undefined {
  if (typeof value === 'boolean') return value;
  if (value === 0 || value === 1) return value === 1;
  if (typeof value === 'string') {
    const t = value.trim().toLowerCase();
    if (['true', 'yes', 'on', 'y', 't', '1'].includes(t)) return true;
    if (['false', 'no', 'off', 'n', 'f', '0'].includes(t)) return false;
  }
  return undefined;
}

/** A finite number as pydantic's lax floats read it: a number, or a decimal string. */
export function toNumber(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined;
  if (typeof value === 'string') return parseDecimal(value);
  return undefined;
}

export const booleanSchema = scalar('true or false', toBool);
