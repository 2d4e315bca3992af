import { ScalarError } from './scalars';
import { describeValue } from './yaml-source';

/**
 * `stop_criteria:` as dstack has it (`all-done`: the run is done when every node is; `master-done`:
 * when job 0 is, node 0 of the first group), and Troupe's extension `{group-done: GROUP}`: when
 * every node of the named group is done, whatever the group's place in the list (the other groups
 * are then stopped, as with master-done). A mapping, so it never reads as a dstack value.
 */
export type StopCriteriaInput = 'all-done' | 'master-done' | { group_done: string };

const WORDS = ['all-done', 'master-done'] as const;
const GROUP_DONE = 'group-done';

export function parseStopCriteria(value: unknown): StopCriteriaInput {
  if (value === 'all-done' || value === 'master-done') return value;
  const expected = `expected one of ${WORDS.join(', ')} or a mapping {${GROUP_DONE}: GROUP}`;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new ScalarError(`${expected}, got ${describeValue(value)}`);
  const mapping = value as Record<string, unknown>;
  const extra = Object.keys(mapping).find((k) => k !== GROUP_DONE);
  if (extra !== undefined) throw new ScalarError(`unknown field \`${extra}\` in \`stop_criteria\`: ${expected}`, [extra], 'key');
  const group = mapping[GROUP_DONE];
  if (typeof group !== 'string' || group === '') {
    throw new ScalarError(`\`${GROUP_DONE}\` names the group whose nodes end the run, got ${describeValue(group)}`, [GROUP_DONE]);
  }
  return { group_done: group };
}
