import { describe, expect, it } from 'vitest';
import type { Plan } from '../plan/plan-schema';
import { makePlan } from '../../test/helpers/plans';
import { coreOf, exited, jobs, pass, provisioned, ready, running, T0 } from '../../test/helpers/run-core';
import type { Effect } from './effects';
import type { RunEvent } from './events';
import { resubmit } from './outcome';
import { booksToStartWith, peersSettled } from './peers';
import type { RunCore } from './state';

/**
 * The live address book over sequences of events, no server: a new version when what nodes see
 * changes, one publication at a time, on_peers_change where dependencies changed, problems in the
 * run's message.
 */

/** router 0 (depends on decode, runs a hook), decode 1 and 2 (restart-node). */
function pd(): Plan {
  const plan = makePlan('pd', [{ name: 'router', nodes: 1 }, { name: 'decode', nodes: 2 }]);
  plan.groups[0]!.depends_on = [1];
  plan.groups[0]!.on_peers_change = 'reload-router';
  plan.groups[1]!.on_failure = { action: 'restart-node', max_restarts: 3, within_s: null };
  return plan;
}

/** Each publication as its one view (this run keeps no revisions apart). */
const publications = (effects: Effect[]) =>
  effects.flatMap((e) => (e.kind === 'publish-peers' ? [{ version: e.version, views: e.books.length, ...e.books[0]! }] : []));
const done = (version: number, extra: Partial<Extract<RunEvent, { kind: 'peers-published' }>> = {}): RunEvent => ({
  kind: 'peers-published',
  version,
  failed_hooks: [],
  error: null,
  ...extra,
});

/** Started as the shell starts it (run-startup.ts: every node gets the book with its start), and the book settled. */
function live(): RunCore {
  let core = coreOf(pd());
  const all = [0, 1, 2];
  core = pass(core, [jobs(core, all.map((n) => provisioned(n))), { kind: 'unlocked' }], T0 + 1000).core;
  core = booksToStartWith(core, core.run.jobs).core;
  core = pass(core, [{ kind: 'announced' }], T0 + 1000).core;
  core = pass(core, [jobs(core, all.map((n) => running(n)))], T0 + 2000).core;
  // Running, the nodes are READY now: what they see changed, a publication goes out.
  const publishing = core.live!.peers.publishing;
  return publishing ? pass(core, [done(publishing.version)], T0 + 2500).core : core;
}

describe('the live address book', () => {
  it('nodes that started with the current book get nothing more', () => {
    const core = live();
    expect(publications(pass(core, [], T0 + 3000).effects)).toEqual([]);
    expect(peersSettled(core)).toBe(true);
  });

  it('a node replaced: a new version to every running node, the hook on its dependents; settled once published', () => {
    const core = live();
    const version = core.live!.peers.book!.version;
    const failed = pass(core, [jobs(core, [exited(2, 1)])], T0 + 3000);
    const [publication, ...more] = publications(failed.effects);
    expect(more).toEqual([]);
    expect(publication!.version).toBe(version + 1);
    expect(publication!.jobs.map((j) => j.job_num)).toEqual([0, 1]);
    expect(publication!.hooks.map((h) => [h.job_num, h.label, h.command])).toEqual([[0, 'router/0', 'reload-router']]);
    const book = JSON.parse(publication!.json) as { version: number; groups: Array<{ nodes: Array<{ rank: number; status: string; ip: string | null }> }> };
    expect(book.groups[1]!.nodes.map((n) => [n.rank, n.status, n.ip])).toEqual([[1, 'ready', '10.0.0.2'], [2, 'restarting', null]]);
    expect(failed.core.run.peers_version).toBe(version + 1);
    expect(peersSettled(failed.core)).toBe(false);
    // One publication at a time: the replacement's address waits for the first to be over.
    const addressed = pass(failed.core, [jobs(failed.core, [provisioned(2, 1)])], T0 + 3100);
    expect(publications(addressed.effects)).toEqual([]);
    const next = pass(addressed.core, [done(version + 1)], T0 + 3200);
    expect(publications(next.effects).map((p) => p.version)).toEqual([version + 2]);
    const settled = pass(next.core, [done(version + 2)], T0 + 3300).core;
    expect(peersSettled(settled)).toBe(true);
  });

  it('a failed hook is the run’s message until a publication goes through; an undelivered book is sent again', () => {
    const core = live();
    const v = core.live!.peers.book!.version + 1;
    const failed = pass(core, [jobs(core, [exited(2, 1)])], T0 + 3000).core;
    const hookFailed = pass(failed, [done(v, { failed_hooks: [{ label: 'router/0', exit_code: 3, output: 'no config' }] })], T0 + 3100).core;
    expect(hookFailed.run.message).toBe(`on_peers_change (peers v${v}) failed on router/0 exited 3: no config`);
    const again = pass(hookFailed, [jobs(hookFailed, [provisioned(2, 1)])], T0 + 3200);
    const [second] = publications(again.effects);
    const lost = pass(again.core, [done(second!.version, { error: 'host gone' })], T0 + 3300);
    expect(lost.core.run.message).toBe(`peers v${second!.version} not delivered: host gone`);
    // Not delivered: the same nodes are behind, so the book goes out again.
    expect(publications(lost.effects).map((p) => [p.version, p.jobs.map((j) => j.job_num)])).toEqual([[second!.version, [0, 1]]]);
    const ok = pass(lost.core, [done(second!.version)], T0 + 3400).core;
    expect(ok.run.message).toBeNull();
  });

  it('the replacement, once running, gets the book too; versions only go up across a resubmission', () => {
    let core = live();
    core = pass(core, [jobs(core, [exited(2, 1)])], T0 + 3000).core;
    core = pass(core, [done(core.live!.peers.publishing!.version), jobs(core, [provisioned(2, 1), running(2, 1), ready(2, 1)])], T0 + 3100).core;
    const publishing = core.live!.peers.publishing!;
    expect(publishing.targets.map((t) => [t.job_num, t.attempt])).toEqual([[0, 0], [1, 0], [2, 1]]);
    const highest = core.run.peers_version;
    const fresh = resubmit(core, T0 + 9000);
    expect(fresh.live!.peers.book).toBeNull();
    const placed = { ...fresh, run: { ...fresh.run, jobs: fresh.run.jobs.map((j, n) => ({ ...j, instance: core.run.jobs[n]!.instance })) } };
    const again = booksToStartWith(placed, placed.run.jobs);
    expect(again.starts?.map((s) => s.book.peers?.version)).toEqual([highest + 1]);
  });
});
