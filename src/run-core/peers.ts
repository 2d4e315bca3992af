import type { AddressBook } from '../contract/message-schemas';
import type { JobState } from '../contract/run-state';
import type { Decision, Effect } from './effects';
import type { RunEvent } from './events';
import { activeJobs, addressBookOf, isJobFinished } from './jobs';
import { drainingRanks, type LiveCore } from './live';
import type { RunCore } from './state';
import type { PeersBook } from '../contract/core-state-schema';
import { isJobReady } from './startup-order';
import { byView, sees, viewOf } from './revisions';

/**
 * The run's live address book (every node's peers.json): made from the run's state, its version
 * raised whenever its content changes, written to every running node that has an older one, and
 * followed by `on_peers_change` on the nodes of groups whose dependencies changed. One publication
 * at a time (versions reach each node in order); a failed hook is noted in the run's message, not
 * fatal: the node keeps running. A service that keeps its revisions apart (revisions.ts) gives each
 * node the book of its own revision: one publication carries a book per revision. Pure: the run's
 * loop carries a publication out and reports it back.
 */
export function decidePeers(core: RunCore, event: RunEvent, _now: number): Decision<RunCore> {
  const effects: Effect[] = [];
  const live = core.live;
  if (!live) return { state: core, effects };
  if (event.kind === 'peers-published') return { state: published(core, live, event), effects };
  if (event.kind !== 'tick' || live.peers.publishing || core.submission.phase !== 'started' || core.submission.ending) return { state: core, effects };
  const { core: next, book } = peersNow(core);
  const nextLive = next.live ?? live;
  const targets = behind(next, nextLive, book.version);
  const hooks = hooksDue(next, nextLive, book);
  if (targets.length === 0 && hooks.length === 0) return { state: next, effects };
  const hookViews = byView(next, hooks.map(({ job, command }) => ({ job_num: job.job_num, job, command })));
  const books = byView(next, targets).map(({ revision, jobs }) => ({ revision, jobs, hooks: hookViews.find((v) => v.revision === revision)?.jobs ?? [] }));
  for (const view of hookViews) if (!books.some((b) => b.revision === view.revision)) books.push({ revision: view.revision, jobs: [], hooks: view.jobs });
  effects.push({
    kind: 'publish-peers',
    version: book.version,
    books: books.map((view) => ({
      json: JSON.stringify(bookFor(next, book, view.revision)),
      jobs: view.jobs.flatMap((job) => (job.instance ? [{ job_num: job.job_num, attempt: job.attempt, instance: job.instance }] : [])),
      hooks: view.hooks.flatMap(({ job, command }) =>
        job.instance ? [{ job_num: job.job_num, attempt: job.attempt, instance: job.instance, label: `${job.group_name}/${job.group_job_index}`, command }] : [],
      ),
    })),
  });
  const publishing = {
    version: book.version,
    targets: targets.map((job) => ({ job_num: job.job_num, attempt: job.attempt })),
    hooks: hooks.map(({ job, key }) => ({ job_num: job.job_num, attempt: job.attempt, key })),
  };
  return { state: { ...next, live: { ...nextLive, peers: { ...nextLive.peers, publishing } } }, effects };
}

/** What the nodes of revision `revision` see of `book` (null: the whole book). */
export function bookFor(core: RunCore, book: PeersBook, revision: number | null): PeersBook {
  return revision === null ? book : { ...book, revision, groups: groupsOf(core, revision) };
}

/** The book as it is now: a new version when its content changed since the last one (a run that is not live: version 1). */
export function peersNow(core: RunCore): { core: RunCore; book: PeersBook } {
  const groups = groupsOf(core, null);
  const run_name = core.plan.run_name;
  const live = core.live;
  if (!live) return { core, book: { version: 1, run_name, groups } };
  const key = JSON.stringify(groups);
  if (live.peers.book !== null && key === live.peers.key) return { core, book: live.peers.book };
  // Versions only go up, across resubmissions too.
  const book = { version: Math.max(live.peers.book?.version ?? 0, core.run.peers_version) + 1, run_name, groups };
  core.run.peers_version = book.version;
  return { core: { ...core, live: { ...live, peers: { ...live.peers, book, key } } }, book };
}

/** These nodes get this book with their start: what their hooks are due for is counted from it. */
export function noteBookSent(core: RunCore, jobs: readonly JobState[], book: PeersBook): RunCore {
  const live = core.live;
  if (!live || jobs.length === 0) return core;
  const sent = { ...live.peers.sent };
  const seen = { ...live.peers.seen };
  for (const job of jobs) {
    sent[job.job_num] = { attempt: job.attempt, version: book.version };
    const view = bookFor(core, book, viewOf(core, job.job_num));
    seen[job.job_num] = { attempt: job.attempt, key: dependencyKey(view, core.plan.groups[job.group_index]?.depends_on ?? []) };
  }
  return { ...core, live: { ...live, peers: { ...live.peers, sent, seen } } };
}

/**
 * The address books for nodes the run lets start now (what DSTACK_* and their first peers.json say),
 * noted as theirs: one per view (revisions.ts), each with the nodes that get it; undefined while
 * some rank has no address yet.
 */
export function booksToStartWith(core: RunCore, jobs: readonly JobState[]): { core: RunCore; starts: Array<{ jobs: JobState[]; book: AddressBook }> | undefined } {
  const addresses = addressBookOf(core.run, { partial: true });
  if (!addresses) return { core, starts: undefined };
  const now = peersNow(core);
  const starts = byView(now.core, jobs).map(({ revision, jobs: them }) => {
    const visible = sees(now.core, revision);
    // Ranks of other revisions are out of this view: absent from DSTACK_* and `${{ … }}` as removed ranks are.
    const hidden = visible ? now.core.run.jobs.filter((job) => !visible(job)).map((job) => job.job_num) : [];
    const removed = [...new Set([...(addresses.removed ?? []), ...hidden])].sort((a, b) => a - b);
    const book: AddressBook = { ...addresses, ...(removed.length > 0 ? { removed } : {}), peers: bookFor(now.core, now.book, revision) };
    return { jobs: them, book };
  });
  return { core: noteBookSent(now.core, jobs, now.book), starts };
}

/** Every running node has the current book and no hook is due or running. */
export function peersSettled(core: RunCore): boolean {
  const live = core.live;
  if (!live) return true;
  const { book, publishing, key } = live.peers;
  if (publishing) return false;
  if (!book) return true;
  return JSON.stringify(groupsOf(core, null)) === key && behind(core, live, book.version).length === 0 && hooksDue(core, live, book).length === 0;
}

/** This node has the book as the run's state makes it now (a router that reads it sees every ready replica the table counts on). */
export function hasCurrentBook(core: RunCore, job: JobState): boolean {
  const live = core.live;
  if (!live?.peers.book) return true;
  const sent = live.peers.sent[job.job_num];
  return sent?.attempt === job.attempt && sent.version === live.peers.book.version && JSON.stringify(groupsOf(core, null)) === live.peers.key;
}

/** A problem of the book's is not the run's end: it is left out of the final message. */
export function withoutPeersProblem(core: RunCore): RunCore {
  const problem = core.live?.peers.problem;
  if (problem && core.run.message === problem) core.run.message = null;
  return core;
}

type PeerStatus = PeersBook['groups'][number]['nodes'][number]['status'];

function statusOf(core: RunCore, job: JobState, draining: ReadonlySet<number>): PeerStatus {
  if (isJobFinished(job)) return 'ended';
  // Taken out by a resize: the router must send it nothing new before it is stopped.
  if (draining.has(job.job_num)) return 'draining';
  // Replaced after a failure and without its new machine yet.
  if (job.restarts > 0 && job.instance === null) return 'restarting';
  if (job.ready_at !== null || (job.running_at !== null && isJobReady(core.plan, job))) return 'ready';
  return job.running_at !== null ? 'running' : 'starting';
}

/** The book's groups as replicas of `revision` see them (null: every rank). */
function groupsOf(core: RunCore, revision: number | null): PeersBook['groups'] {
  const visible = sees(core, revision);
  const jobs = visible ? activeJobs(core.run).filter(visible) : activeJobs(core.run);
  const draining = drainingRanks(core.live);
  return core.plan.groups.map((group) => ({
    name: group.name,
    index: group.index,
    nodes: jobs
      .filter((job) => job.group_index === group.index)
      .map((job) => {
        const status = statusOf(core, job, draining);
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

/** Running nodes whose book is older than `version` (or that have a new machine since). */
function behind(core: RunCore, live: LiveCore, version: number): JobState[] {
  return activeJobs(core.run).filter((job) => {
    if (job.running_at === null || isJobFinished(job)) return false;
    const sent = live.peers.sent[job.job_num];
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
function hooksDue(core: RunCore, live: LiveCore, book: PeersBook): Array<{ job: JobState; command: string; key: string }> {
  const due: Array<{ job: JobState; command: string; key: string }> = [];
  for (const group of core.plan.groups) {
    if (!group.on_peers_change) continue;
    const keys = new Map<number | null, string>();
    for (const job of activeJobs(core.run)) {
      if (job.group_index !== group.index || job.running_at === null || isJobFinished(job)) continue;
      const view = viewOf(core, job.job_num);
      const key = keys.get(view) ?? dependencyKey(bookFor(core, book, view), group.depends_on ?? []);
      keys.set(view, key);
      const seen = live.peers.seen[job.job_num];
      if (seen && seen.attempt === job.attempt && seen.key === key) continue;
      due.push({ job, command: group.on_peers_change, key });
    }
  }
  return due;
}

/** A publication is over: its nodes have its version, its hooks ran; what went wrong becomes the run's message (cleared once one goes through). */
function published(core: RunCore, live: LiveCore, event: Extract<RunEvent, { kind: 'peers-published' }>): RunCore {
  const publishing = live.peers.publishing;
  if (!publishing || publishing.version !== event.version) return core;
  const sent = { ...live.peers.sent };
  const seen = { ...live.peers.seen };
  if (event.error === null) {
    for (const t of publishing.targets) sent[t.job_num] = { attempt: t.attempt, version: publishing.version };
    for (const h of publishing.hooks) seen[h.job_num] = { attempt: h.attempt, key: h.key };
  }
  const why = event.failed_hooks.map((h) => `${h.label} exited ${h.exit_code}${h.output ? `: ${h.output}` : ''}`).join('; ');
  const problem =
    event.error !== null
      ? `peers v${event.version} not delivered: ${event.error}`
      : event.failed_hooks.length > 0
        ? `on_peers_change (peers v${event.version}) failed on ${why}`
        : null;
  if (core.run.message === live.peers.problem) core.run.message = problem;
  return { ...core, live: { ...live, peers: { ...live.peers, sent, seen, publishing: null, problem } } };
}
