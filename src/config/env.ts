import { z } from 'zod';
import { ScalarError, toText } from './scalars';
import { describeValue } from './yaml-source';

/**
 * `env:` as a list (`KEY=VALUE`, or a bare `KEY` whose value comes from the submitting shell) or a
 * mapping. The order of the file is kept.
 */
export const EnvEntrySchema = z.object({
  key: z.string(),
  /** null: take the value from the submitting shell's environment. */
  value: z.string().nullable(),
  /** Where the entry is under `env`: its list index or its mapping key. */
  at: z.union([z.number(), z.string()]),
});
export type EnvEntry = z.infer<typeof EnvEntrySchema>;

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function parseEnv(value: unknown): EnvEntry[] {
  const entries: EnvEntry[] = [];
  const seen = new Set<string>();
  const add = (entry: EnvEntry): void => {
    if (entry.key === '__proto__') throw new ScalarError('`__proto__` cannot be an environment variable name here', [entry.at], 'key');
    if (entry.value?.includes('\0')) {
      throw new ScalarError(`the value of ${entry.key} contains a NUL byte, which no environment can carry`, [entry.at]);
    }
    if (seen.has(entry.key)) throw new ScalarError(`duplicate environment variable ${entry.key}`, [entry.at]);
    seen.add(entry.key);
    entries.push(entry);
  };
  if (Array.isArray(value)) {
    value.forEach((item, index) => {
      const text = toText(item);
      const eq = text?.indexOf('=') ?? -1;
      const key = text === undefined ? undefined : eq === -1 ? text : text.slice(0, eq);
      if (text === undefined || key === undefined || !NAME.test(key)) {
        throw new ScalarError(`expected KEY=VALUE or KEY (a variable name: letters, digits, _), got ${describeValue(item)}`, [index]);
      }
      add({ key, value: eq === -1 ? null : text.slice(eq + 1), at: index });
    });
    return entries;
  }
  if (value !== null && typeof value === 'object' && !(value instanceof Date)) {
    for (const [key, raw] of Object.entries(value)) {
      if (!NAME.test(key)) {
        throw new ScalarError(`"${key}" is not a variable name (letters, digits, _; not starting with a digit)`, [key], 'key');
      }
      const text = toText(raw);
      if (text === undefined) {
        throw new ScalarError(
          `expected a string value, got ${describeValue(raw)}; to pass ${key} from your shell, list it as \`- ${key}\``,
          [key],
        );
      }
      add({ key, value: text, at: key });
    }
    return entries;
  }
  throw new ScalarError(`expected a list of KEY=VALUE or a mapping, got ${describeValue(value)}`);
}
