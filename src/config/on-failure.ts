import { OnFailureSchema, type OnFailure } from '../plan/plan-schema';
import { parseDuration } from './duration';
import { ScalarError, toInt, within } from './scalars';
import { describeValue } from './yaml-source';

/**
 * A group's `on_failure:` (Troupe's extension): `restart-node`, `restart-group` or `fail-run`, or
 * a mapping `{action, max_restarts, within}`. A restart budget is `max_restarts` restarts of the
 * group within `within` (a dstack duration; left out: over the whole run).
 */
export const DEFAULT_MAX_RESTARTS = 3;

const ACTIONS = OnFailureSchema.shape.action.options;
const FIELDS = ['action', 'max_restarts', 'within'];

function action(value: unknown): OnFailure['action'] {
  const parsed = OnFailureSchema.shape.action.safeParse(value);
  if (!parsed.success) throw new ScalarError(`expected one of ${ACTIONS.join(', ')}, got ${describeValue(value)}`);
  return parsed.data;
}

function maxRestarts(value: unknown): number {
  const n = toInt(value);
  if (n === undefined || n < 0) throw new ScalarError(`expected a whole number of restarts (0 or more), got ${describeValue(value)}`);
  return n;
}

function windowSeconds(value: unknown): number {
  const seconds = parseDuration(value);
  if (seconds <= 0) throw new ScalarError(`expected a duration of more than 0 seconds, got ${describeValue(value)}`);
  return seconds;
}

export function parseOnFailure(value: unknown): OnFailure {
  if (typeof value === 'string') {
    const chosen = action(value);
    return { action: chosen, max_restarts: chosen === 'fail-run' ? 0 : DEFAULT_MAX_RESTARTS, within_s: null };
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new ScalarError(`expected one of ${ACTIONS.join(', ')} or a mapping with \`action\`, \`max_restarts\` and \`within\`, got ${describeValue(value)}`);
  }
  const mapping = value as Record<string, unknown>;
  const extra = Object.keys(mapping).find((k) => !FIELDS.includes(k));
  if (extra !== undefined) {
    throw new ScalarError(`unknown field \`${extra}\` in \`on_failure\`: expected \`action\`, \`max_restarts\` and \`within\``, [extra], 'key');
  }
  if (mapping.action === undefined || mapping.action === null) {
    throw new ScalarError(`\`on_failure\` needs an \`action\`: one of ${ACTIONS.join(', ')}`);
  }
  const chosen = within('action', () => action(mapping.action));
  const given = ['max_restarts', 'within'].find((k) => mapping[k] !== undefined && mapping[k] !== null);
  if (chosen === 'fail-run') {
    if (given !== undefined) throw new ScalarError(`\`${given}\` has no meaning with \`action: fail-run\`: remove it, or restart nodes with restart-node or restart-group`, [given], 'key');
    return { action: chosen, max_restarts: 0, within_s: null };
  }
  return {
    action: chosen,
    max_restarts: mapping.max_restarts === undefined || mapping.max_restarts === null ? DEFAULT_MAX_RESTARTS : within('max_restarts', () => maxRestarts(mapping.max_restarts)),
    within_s: mapping.within === undefined || mapping.within === null ? null : within('within', () => windowSeconds(mapping.within)),
  };
}
