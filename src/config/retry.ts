import { RetryEventSchema, type RetryEvent } from '../plan/plan-schema';
import { parseDuration } from './duration';
import { ScalarError, toBool } from './scalars';
import { describeValue } from './yaml-source';

/** `retry:` as written: `true`/`false`, or which events to retry on and for how long. */
export type RetryInput = boolean | { on_events: RetryEvent[] | null; duration: number | null };

const events = RetryEventSchema.options;

export function parseRetry(value: unknown): RetryInput {
  const flag = toBool(value);
  if (flag !== undefined) return flag;
  if (value === null || typeof value !== 'object' || Array.isArray(value) || value instanceof Date) {
    throw new ScalarError(`expected true, false or a mapping with \`on_events\` and \`duration\`, got ${describeValue(value)}`);
  }
  const mapping = value as Record<string, unknown>;
  const extra = Object.keys(mapping).find((k) => k !== 'on_events' && k !== 'duration');
  if (extra !== undefined) {
    throw new ScalarError(`unknown field \`${extra}\` in \`retry\`: expected \`on_events\` and \`duration\``, [extra], 'key');
  }
  let onEvents: RetryEvent[] | null = null;
  if (mapping.on_events !== undefined && mapping.on_events !== null) {
    if (!Array.isArray(mapping.on_events)) {
      throw new ScalarError(`expected a list of events (${events.join(', ')}), got ${describeValue(mapping.on_events)}`, ['on_events']);
    }
    if (mapping.on_events.length === 0) {
      throw new ScalarError(`\`on_events\` cannot be empty: list events (${events.join(', ')}) or leave it out to retry on all`, [
        'on_events',
      ]);
    }
    onEvents = mapping.on_events.map((event, index) => {
      const parsed = RetryEventSchema.safeParse(event);
      if (!parsed.success) throw new ScalarError(`expected one of ${events.join(', ')}, got ${describeValue(event)}`, ['on_events', index]);
      return parsed.data;
    });
  }
  let duration: number | null = null;
  if (mapping.duration !== undefined && mapping.duration !== null) {
    try {
      duration = parseDuration(mapping.duration);
    } catch (err) {
      if (err instanceof ScalarError) throw new ScalarError(err.message, ['duration']);
      throw err;
    }
  }
  return { on_events: onEvents, duration };
}
