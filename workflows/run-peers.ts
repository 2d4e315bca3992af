import type { Instance } from '../src/backends/backend';
import type { Effect } from '../src/run-core/effects';
import { rootMessage } from './failures';
import { teardownActivities } from './node-group-activities';
import type { Run } from './run-context';
import { jobRefOf } from './run-job-refs';

/** How long one `on_peers_change` may run. */
const HOOK_TIMEOUT_S = 60;

/**
 * A publication of the live address book the core decided (src/run-core/peers.ts): peers.json to
 * the nodes, then the hooks; the run's loop hears back with a `peers-published` event.
 */
export function publishPeers(run: Run, effect: Extract<Effect, { kind: 'publish-peers' }>): void {
  const refOf = ({ job_num, attempt, instance }: { job_num: number; attempt: number; instance: Instance }) => {
    const job = run.state.jobs[job_num];
    return job ? jobRefOf(run, job, { attempt, instance }) : null;
  };
  const refs = effect.jobs.flatMap((j) => refOf(j) ?? []);
  const hooks = effect.hooks.flatMap((h) => {
    const ref = refOf(h);
    return ref ? [{ job: ref, label: h.label, command: h.command }] : [];
  });
  const summary = `peers v${effect.version} to ${refs.length} node${refs.length === 1 ? '' : 's'}${hooks.length > 0 ? `, on_peers_change on ${hooks.map((h) => h.label).join(', ')}` : ''}`;
  void teardownActivities.publishPeers
    .executeWithOptions({ summary }, [
      { backend: run.input.backend, peers: { version: effect.version, json: effect.json }, jobs: refs, hooks, hook_timeout_s: HOOK_TIMEOUT_S },
    ])
    .then(
      ({ hooks: results }) => {
        const failed = results.filter((h) => h.exit_code !== 0).map(({ label, exit_code, output }) => ({ label, exit_code, output }));
        run.inbox.push({ kind: 'peers-published', version: effect.version, failed_hooks: failed, error: null });
      },
      (err: unknown) => run.inbox.push({ kind: 'peers-published', version: effect.version, failed_hooks: [], error: rootMessage(err) }),
    );
}
