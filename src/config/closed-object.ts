import { z } from 'zod';

/**
 * A mapping whose fields are all known. A field outside the shape is refused, never ignored:
 * a dstack field Troupe does not implement says so, anything else is an unknown field (with a
 * suggestion when it looks like a typo).
 */
export interface FieldPolicy {
  /** What the mapping is, for messages: "the task", "a group". */
  what: string;
  /** dstack fields Troupe does not implement, with the reason (or `true` for the plain message). */
  unsupported?: Readonly<Record<string, string | true>>;
  /** Fields a later Troupe version will add. */
  planned?: readonly string[];
  /** A custom refusal for a field given the whole mapping (e.g. `entrypoint` beside `groups`). */
  special?: (field: string, mapping: Record<string, unknown>) => string | undefined;
}

export function closedObject<T extends z.ZodRawShape>(shape: T, policy: FieldPolicy) {
  const known = Object.keys(shape);
  return z.preprocess((value, ctx) => {
    if (value === null || typeof value !== 'object' || Array.isArray(value) || value instanceof Date) return value;
    const mapping = value as Record<string, unknown>;
    const kept: Record<string, unknown> = {};
    let reported = false;
    for (const [field, fieldValue] of Object.entries(mapping)) {
      if (known.includes(field)) {
        kept[field] = fieldValue;
        continue;
      }
      // One unknown field per mapping is enough to refuse it: thousands of issues would each be
      // located in the file (linear each, quadratic in all).
      if (reported) continue;
      reported = true;
      // Reported as an unrecognized key: zod then still parses the known fields, so the refusal
      // shown can be the first one in the file.
      ctx.addIssue({ code: 'unrecognized_keys', keys: [field], message: refusal(field, mapping, known, policy), input: mapping });
    }
    return kept;
  }, z.object(shape));
}

function refusal(field: string, mapping: Record<string, unknown>, known: readonly string[], policy: FieldPolicy): string {
  const special = policy.special?.(field, mapping);
  if (special) return special;
  const reason = policy.unsupported && Object.hasOwn(policy.unsupported, field) ? policy.unsupported[field] : undefined;
  if (reason !== undefined) {
    const why = reason === true ? '' : ` (${reason})`;
    return `Troupe does not support the dstack field \`${field}\`${why}: remove it`;
  }
  if (policy.planned?.includes(field)) return `\`${field}\` in ${policy.what} is not supported yet: remove it`;
  const near = closest(field, known);
  return `unknown field \`${field}\` in ${policy.what}${near ? ` (did you mean \`${near}\`?)` : ''}`;
}

/** The known field a typo most likely meant, if one is close enough. */
function closest(field: string, known: readonly string[]): string | undefined {
  const limit = Math.max(1, Math.floor(field.length / 3));
  let best: { name: string; distance: number } | undefined;
  for (const name of known) {
    const distance = editDistance(name, field);
    if (distance <= limit && (!best || distance < best.distance)) best = { name, distance };
  }
  return best?.name;
}

/** Levenshtein distance, for "did you mean" hints on short field names. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}

/**
 * A refusal by a rule across fields (checked after the fields parse): ranked after field-level
 * refusals, see parseWithSchema.
 */
export function ruleIssue(path: (string | number)[], message: string, target: 'key' | 'value' = 'value') {
  return { code: 'custom' as const, path, message, params: { rule: true, target } };
}
