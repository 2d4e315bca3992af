import { rootMessage } from './failures';
import { activeJobs, addressBookOf, isJobFinished } from '../src/run-core/jobs';
import { teardownActivities } from './node-group-activities';
import type { AddressBook, PeersBook } from './messages';
import type { Run } from './run-context';
import { jobRefOf } from './run-job-refs';
import type { LiveRun } from './run-live';
import type { JobState } from './run-state';
import { isJobReady } from '../src/run-core/startup-order';

/**
 * The run's live address book (every node's peers.json): made from the run's state, its version
 * raised whenever its content changes, written to every running node that has an older one, and
 * followed by `on_peers_change` on the nodes of groups whose dependencies changed.
 */

/** How long one `on_peers_change` may run. */
const HOOK_TIMEOUT_S = 60;

type PeerStatus = PeersBook['groups'][number]['nodes'][number]['status'];

function statusOf(run: Run, job: JobState): PeerStatus {
  if (isJobFinished(job)) return 'ended';
  // Replaced after a failure and without its new machine yet.
  if (job.restarts > 0 && job.instance === null) return 'restarting';
  if (job.ready_at !== null || (job.running_at !== null && isJobReady(run.input.plan, job))) return 'ready';
  return job.running_at !== null ? 'running' : 'starting';
}

function groupsOf(run: Run): PeersBook['groups'] {
  const jobs = activeJobs(run.state);
  return run.input.plan.groups.map((group) => ({
    name: group.name,
    index: group.index,
    nodes: jobs
      .filter((job) => job.group_index === group.index)
      .map((job) => {
        const status = statusOf(run, job);
        return {
          rank: job.job_num,
          group_rank: job.group_job_index,
          ip: job.instance?.internal_ip ?? null,
          gpus: job.instance?.gpus ?? 0,
          attempt: job.attempt,
          status,
          ready: status === 'ready',
        };
      }),
  }));
}

/** The book as it is now: a new version when its content changed since the last one. */
export function currentPeers(run: Run): PeersBook {
  const { live } = run;
  const groups = groupsOf(run);
  const key = JSON.stringify(groups);
  if (!live) return { version: 1, run_name: run.input.plan.run_name, groups };
  if (live.peers.book === null || key !== live.peers.key) {
    // Versions only go up, across resubmissions too.
    live.peers.book = { version: Math.max(live.peers.book?.version ?? 0, run.state.peers_version) + 1, run_name: run.input.plan.run_name, groups };
    live.peers.key = key;
    run.state.peers_version = live.peers.book.version;
  }
  return live.peers.book;
}

/** These nodes get this book with their start: what their hooks are due for is counted from it. */
export function noteBookSent(run: Run, jobs: JobState[], book: PeersBook): void {
  const { live } = run;
  if (!live) return;
  for (const job of jobs) {
    live.peers.sent.set(job.job_num, { attempt: job.attempt, version: book.version });
    const deps = run.input.plan.groups[job.group_index]?.depends_on ?? [];
    live.peers.seen.set(job.job_num, { attempt: job.attempt, key: dependencyKey(book, deps) });
  }
}

/** The address book for nodes the run lets start now (what DSTACK_* and their first peers.json say), noted as theirs. */
export function bookToStartWith(run: Run, jobs: JobState[]): AddressBook | undefined {
  const addresses = addressBookOf(run.state, { partial: true });
  if (!addresses) return undefined;
  const peers = currentPeers(run);
  noteBookSent(run, jobs, peers);
  return { ...addresses, peers };
}

/** Running nodes whose book is older than `version` (or that have a new machine since). */
function behind(run: Run, live: LiveRun, version: number): JobState[] {
  return activeJobs(run.state).filter((job) => {
    if (job.running_at === null || isJobFinished(job)) return false;
    const sent = live.peers.sent.get(job.job_num);
    return !sent || sent.attempt !== job.attempt || sent.version < version;
  });
}

/** What the dependencies of group `index` look like to its hook: addresses and readiness. */
function dependencyKey(book: PeersBook, dependsOn: number[]): string {
  return JSON.stringify(dependsOn.map((d) => book.groups[d]?.nodes.map((n) => [n.rank, n.ip, n.ready])));
}

/**
 * The hooks due: on each running node of a group with `on_peers_change`, when its dependencies
 * are not as the node last saw them (in the book it started with, or at its last hook).
 */
function hooksDue(run: Run, live: LiveRun, book: PeersBook): Array<{ job: JobState; command: string; key: string }> {
  const due: Array<{ job: JobState; command: string; key: string }> = [];
  for (const group of run.input.plan.groups) {
    if (!group.on_peers_change) continue;
    const key = dependencyKey(book, group.depends_on ?? []);
    for (const job of activeJobs(run.state)) {
      if (job.group_index !== group.index || job.running_at === null || isJobFinished(job)) continue;
      const seen = live.peers.seen.get(job.job_num);
      if (seen && seen.attempt === job.attempt && seen.key === key) continue;
      due.push({ job, command: group.on_peers_change, key });
    }
  }
  return due;
}

/**
 * Brings every running node's peers.json to the current version, then runs the hooks that are
 * due. One publication at a time (versions reach each node in order); the loop calls this again
 * when it ends. Failed hooks are noted in the run's message, not fatal: the node keeps running.
 */
export function publishPeers(run: Run): void {
  const { live } = run;
  if (!live || live.peers.publishing) return;
  const book = currentPeers(run);
  const targets = behind(run, live, book.version);
  const hooks = hooksDue(run, live, book);
  if (targets.length === 0 && hooks.length === 0) return;
  live.peers.publishing = true;
  const refs = targets.flatMap((job) => jobRefOf(run, job) ?? []);
  const hookRefs = hooks.flatMap(({ job, command }) => {
    const ref = jobRefOf(run, job);
    return ref ? [{ job: ref, label: `${job.group_name}/${job.group_job_index}`, command }] : [];
  });
  const summary = `peers v${book.version} to ${refs.length} node${refs.length === 1 ? '' : 's'}${hookRefs.length > 0 ? `, on_peers_change on ${hookRefs.map((h) => h.label).join(', ')}` : ''}`;
  void teardownActivities.publishPeers
    .executeWithOptions({ summary }, [
      { backend: run.input.backend, peers: { version: book.version, json: JSON.stringify(book) }, jobs: refs, hooks: hookRefs, hook_timeout_s: HOOK_TIMEOUT_S },
    ])
    .then(
      ({ hooks: results }) => {
        for (const job of targets) live.peers.sent.set(job.job_num, { attempt: job.attempt, version: book.version });
        for (const { job, key } of hooks) live.peers.seen.set(job.job_num, { attempt: job.attempt, key });
        const failedHooks = results.filter((h) => h.exit_code !== 0);
        const why = failedHooks.map((h) => `${h.label} exited ${h.exit_code}${h.output ? `: ${h.output}` : ''}`).join('; ');
        noteProblem(run, live, failedHooks.length > 0 ? `on_peers_change (peers v${book.version}) failed on ${why}` : null);
      },
      (err: unknown) => noteProblem(run, live, `peers v${book.version} not delivered: ${rootMessage(err)}`),
    )
    .finally(() => {
      live.peers.publishing = false;
      run.version += 1;
    });
}

/**
 * The run's message says what last went wrong with the book or a hook (a node keeps running: it
 * is not the run's failure), and is cleared once a publication goes through.
 */
function noteProblem(run: Run, live: LiveRun, problem: string | null): void {
  if (run.state.message === live.peers.problem) run.state.message = problem;
  live.peers.problem = problem;
}

/** A problem of the book's is not the run's end: it is left out of the final message. */
export function clearPeersProblem(run: Run): void {
  const { live } = run;
  if (live?.peers.problem && run.state.message === live.peers.problem) run.state.message = null;
}

/** Every running node has the current book and no hook is due or running. */
export function peersSettled(run: Run): boolean {
  const { live } = run;
  if (!live) return true;
  const { book, publishing, key } = live.peers;
  if (publishing) return false;
  if (!book) return true;
  return JSON.stringify(groupsOf(run)) === key && behind(run, live, book.version).length === 0 && hooksDue(run, live, book).length === 0;
}
