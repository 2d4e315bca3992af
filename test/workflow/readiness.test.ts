import { describe, expect, it } from 'vitest';
import type { Plan, ReadyProbe } from '../../src/plan/plan-schema';
import { runStateQuery } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { makeLocalFleet, makeSharedDir, processGroupMembers } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { useLocalTroupe } from '../helpers/local-troupe';

/** depends_on + ready (Troupe's extension), with real processes and probes run on the nodes. */

const fleet = makeLocalFleet();
const shared = makeSharedDir();
const env = useLocalTroupe(fleet, { cleanup: () => shared.remove() });

const httpReady = (timeout_s = 30): ReadyProbe => ({ check: { kind: 'http', port: 8000, path: '/' }, interval_s: 0.2, timeout_s });
const recordStart = `echo "$DSTACK_NODE_GROUP_NAME/$DSTACK_NODE_GROUP_NODE_RANK $(($(date +%s%N) / 1000000))" >> ${shared.dir}/starts`;
/** A server that takes a moment before it listens, like a model that loads. */
const slowServer = [recordStart, 'sleep 1', 'exec python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1'];

function withGroups(plan: Plan, extra: Record<string, Partial<Plan['groups'][number]>>): Plan {
  return { ...plan, groups: plan.groups.map((g) => ({ ...g, ...(extra[g.name] ?? {}) })) };
}

const start = (plan: Plan) => env.startRun(plan);

describe('depends_on and ready', () => {
  it('a diamond (a → b, c → d) starts each group after its dependencies are ready', async () => {
    // d is the master (group 0) so that master-done ends the run when d is done.
    const base = makePlan('diamond', [
      { name: 'd', nodes: 1, commands: [recordStart] },
      { name: 'a', nodes: 1, commands: slowServer },
      { name: 'b', nodes: 1, commands: slowServer },
      { name: 'c', nodes: 2, commands: slowServer },
    ], { stop_criteria: 'master-done' });
    const plan = withGroups(base, {
      d: { depends_on: [2, 3] },
      a: { ready: httpReady() },
      b: { depends_on: [1], ready: httpReady() },
      c: { depends_on: [1], ready: httpReady() },
    });
    const handle = await start(plan);
    const waiting = await handle.query(runStateQuery);
    expect(waiting.groups.map((g) => g.name)).toEqual(['d', 'a', 'b', 'c']);
    const state = (await handle.result()) as RunState;
    expect(state.status).toBe('DONE');

    const started = new Map(shared.lines('starts').map((l) => l.split(' ') as [string, string]).map(([k, v]) => [k, Number(v)]));
    const readyAt = (group: string) => state.jobs.filter((j) => j.group_name === group).map((j) => Date.parse(j.ready_at ?? 'x'));
    for (const [group, deps] of [['b', ['a']], ['c', ['a']], ['d', ['b', 'c']]] as const) {
      const nodes = state.jobs.filter((j) => j.group_name === group);
      for (const job of nodes) {
        const at = started.get(`${group}/${job.group_job_index}`);
        expect(at, `${group}/${job.group_job_index} started`).toBeDefined();
        for (const dep of deps) for (const r of readyAt(dep)) expect(at!).toBeGreaterThan(r);
      }
    }
    for (const job of state.jobs) if (job.pid !== null) expect(processGroupMembers(job.pid)).toEqual([]);
  });

  it('shows what a waiting group waits for', async () => {
    const base = makePlan('waits', [
      { name: 'router', nodes: 1, commands: ['true'] },
      { name: 'prefill', nodes: 1, commands: ['sleep 300'] },
      { name: 'decode', nodes: 1, commands: ['sleep 300'] },
    ]);
    const plan = withGroups(base, {
      router: { depends_on: [1, 2] },
      prefill: { ready: { check: { kind: 'command', command: `test -e ${shared.dir}/prefill-ready` }, interval_s: 0.2, timeout_s: 60 } },
    });
    const handle = await start(plan);
    const deadline = Date.now() + 30_000;
    let waitingFor: string | null = null;
    while (Date.now() < deadline) {
      const s = await handle.query(runStateQuery);
      waitingFor = s.groups[0]?.waiting_for ?? null;
      if (waitingFor === 'prefill (ready 0/1), decode (ready 1/1)') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(waitingFor).toBe('prefill (ready 0/1), decode (ready 1/1)');
    await import('node:fs').then((fs) => fs.writeFileSync(`${shared.dir}/prefill-ready`, ''));
    const s = await waitForRouterDone(handle);
    expect(s.jobs[1]?.status).toBe('READY');
    expect(s.groups[0]?.waiting_for).toBeNull();
    await handle.signal('stopRun', { abort: true });
    await handle.result();
  });

  it('a probe that never passes fails the run within its timeout, naming the node and the answer', async () => {
    const base = makePlan('never', [
      { name: 'router', nodes: 1, commands: [`echo started >> ${shared.dir}/never-router`] },
      { name: 'prefill', nodes: 1, commands: ['sleep 300'] },
    ]);
    const plan = withGroups(base, { router: { depends_on: [1] }, prefill: { ready: { ...httpReady(3), check: { kind: 'http', port: 8000, path: '/health' } } } });
    const t0 = Date.now();
    const state = (await (await start(plan)).result()) as RunState;
    expect(Date.now() - t0).toBeLessThan(30_000);
    expect(state.status).toBe('FAILED');
    expect(state.jobs[1]?.termination_reason).toBe('WAITING_READY_LIMIT_EXCEEDED');
    const ip = state.jobs[1]?.instance?.internal_ip;
    expect(state.message).toContain(`prefill/0 not ready after 3s: http://${ip}:8000/health → connection refused`);
    expect(state.jobs[0]?.running_at).toBeNull();
    expect(shared.lines('never-router')).toEqual([]);
    for (const job of state.jobs) if (job.pid !== null) expect(processGroupMembers(job.pid)).toEqual([]);
  });
});

async function waitForRouterDone(handle: Awaited<ReturnType<typeof start>>): Promise<RunState> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const s = await handle.query(runStateQuery);
    if (s.jobs[0]?.status === 'DONE') return s;
    if (Date.now() > deadline) throw new Error(`router not done: ${JSON.stringify(s.jobs.map((j) => j.status))}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
