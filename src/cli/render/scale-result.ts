import type { ScaleGroupResult } from '../../client';

function ranks(verb: string, nums: readonly number[]): string {
  return `${verb} rank${nums.length === 1 ? '' : 's'} ${nums.join(', ')}`;
}

/** `decode: 3 nodes (added ranks 4, 5), peers version 7`: what `troupe scale` did. */
export function describeScaleResult(result: ScaleGroupResult): string {
  const changes = [
    result.added.length > 0 ? ranks('added', result.added) : null,
    result.removed.length > 0 ? ranks('removed', result.removed) : null,
  ].filter((c): c is string => c !== null);
  const what = result.deployment !== undefined ? `as deployment ${result.deployment} rolled out` : changes.length > 0 ? changes.join(', ') : 'unchanged';
  return `${result.group}: ${result.nodes} node${result.nodes === 1 ? '' : 's'} (${what}), peers version ${result.peers_version}`;
}
