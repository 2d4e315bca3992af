import type { Effect } from '../../src/run-core/effects';
import { rootMessage } from '../failures';
import { teardownActivities } from '../node-group/node-group-activities';
import type { Run } from './run-context';
import { attemptRefsOf } from './run-job-refs';

/** How long one `on_peers_change` may run. */
const HOOK_TIMEOUT_S = 60;

/**
 * A publication of the live address book the core decided (src/run-core/peers.ts): peers.json to
 * the nodes, then the hooks; the run's loop hears back with a `peers-published` event.
 */
export function publishPeers(run: Run, effect: Extract<Effect, { kind: 'publish-peers' }>): void {
  const { version } = effect;
  const publications = effect.books.map((view) => {
    const refs = attemptRefsOf(run, view.jobs);
    const hooks = view.hooks.flatMap((h) => attemptRefsOf(run, [h]).map((job) => ({ job, label: h.label, command: h.command })));
    const summary = `peers v${version} to ${refs.length} node${refs.length === 1 ? '' : 's'}${hooks.length > 0 ? `, on_peers_change on ${hooks.map((h) => h.label).join(', ')}` : ''}`;
    return teardownActivities.publishPeers.executeWithOptions({ summary }, [
      { backend: run.input.backend, peers: { version, json: view.json }, jobs: refs, hooks, hook_timeout_s: HOOK_TIMEOUT_S },
    ]);
  });
  void Promise.all(publications).then(
    (results) => {
      const failed = results.flatMap((r) => r.hooks.filter((h) => h.exit_code !== 0).map(({ label, exit_code, output }) => ({ label, exit_code, output })));
      run.inbox.push({ kind: 'peers-published', version, failed_hooks: failed, error: null });
    },
    (err: unknown) => run.inbox.push({ kind: 'peers-published', version, failed_hooks: [], error: rootMessage(err) }),
  );
}
