import type { z } from 'zod';
import type { FieldPath } from './field-path';
import { REQUIRED } from './scalars';
import { describeValue, type ConfigSource, type PositionTarget } from './yaml-source';

/**
 * Runs a schema over a parsed config and turns its first refusal — the one earliest in the file —
 * into a ConfigError pointing at the offending node.
 */
export function parseWithSchema<S extends z.ZodType>(schema: S, source: ConfigSource): z.output<S> {
  const result = schema.safeParse(source.data);
  if (result.success) return result.data;
  const refusals = result.error.issues.map((issue) => toRefusal(issue, source.data));
  const ranked = refusals.map((r) => ({ r, pos: source.position(r.path, r.target) }));
  // Rules across fields (marked `rule`) only count once every field reads well: a typo'd field
  // name says more than the rule it then seems to break.
  ranked.sort((a, b) => Number(a.r.rule) - Number(b.r.rule) || a.pos.line - b.pos.line || a.pos.col - b.pos.col);
  const first = ranked[0]?.r ?? { path: [], target: 'value' as const, reason: 'invalid config' };
  throw source.error(first.path, first.reason, { target: first.target });
}

interface Refusal {
  path: FieldPath;
  target: PositionTarget;
  reason: string;
  rule: boolean;
}

function valueAt(data: unknown, path: FieldPath): unknown {
  let node = data;
  for (const part of path) {
    if (node === null || typeof node !== 'object') return undefined;
    node = (node as Record<string | number, unknown>)[part];
  }
  return node;
}

const nouns: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  int: 'an integer',
  boolean: 'true or false',
  array: 'a list',
  object: 'a mapping',
};

function toRefusal(issue: z.core.$ZodIssue, data: unknown): Refusal {
  const path = issue.path.filter((p): p is string | number => typeof p !== 'symbol');
  const actual = valueAt(data, path);
  switch (issue.code) {
    case 'custom': {
      const params = issue.params as { target?: PositionTarget; rule?: boolean } | undefined;
      return { path, target: params?.target ?? 'value', reason: issue.message, rule: params?.rule === true };
    }
    case 'invalid_type':
      if (actual === undefined) return { path, target: 'value', reason: REQUIRED, rule: false };
      return { path, target: 'value', reason: `expected ${nouns[issue.expected] ?? issue.expected}, got ${describeValue(actual)}`, rule: false };
    case 'invalid_value':
      return {
        path,
        target: 'value',
        reason: `expected ${issue.values.length === 1 ? '' : 'one of '}${issue.values.map(String).join(', ')}, got ${describeValue(actual)}`,
        rule: false,
      };
    case 'unrecognized_keys': {
      const key = issue.keys[0] ?? '';
      const reason = issue.message.startsWith('Unrecognized key') ? `unknown field \`${key}\`` : issue.message;
      return { path: [...path, key], target: 'key', reason, rule: false };
    }
    default:
      return { path, target: 'value', reason: issue.message, rule: false };
  }
}
