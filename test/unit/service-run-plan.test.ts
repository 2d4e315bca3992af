import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadServicePlan, PlanSchema, SERVICE_READY_TIMEOUT_S, serviceRunPlan } from '../../src/plan';

/** A service's plan as a run's: groups of replicas in one rank space, and what goes to the gateways. */

const HASH = 'a'.repeat(64);
const plan = (text: string, hashes: string[] | null = [HASH]) => serviceRunPlan(loadServicePlan(text, 'svc.yml', { environ: {} }), hashes);

describe('serviceRunPlan', () => {
  it('makes the PD example a run: replicas MIN at start, MAX by scaling; the router is the entry', () => {
    const file = 'examples/services/pd-router.yml';
    const run = serviceRunPlan(loadServicePlan(readFileSync(file, 'utf8'), file, { environ: {} }), [HASH]);
    expect(PlanSchema.parse(run)).toEqual(run);
    expect(run.groups.map((g) => [g.name, g.nodes, g.nodes_range ?? null])).toEqual([
      ['router', 1, null],
      ['prefill', 1, { min: 1, max: 4 }],
      ['decode', 2, null],
    ]);
    expect(run.nodes_num).toBe(4);
    expect(run.jobs.map((j) => j.node_group_name)).toEqual(['router', 'prefill', 'decode', 'decode']);
    expect(run.service).toEqual({
      revision: expect.stringMatching(/^[0-9a-f]{12}$/),
      port: 8000,
      auth: { token_sha256: [HASH] },
      strip_prefix: true,
      rate_limits: [{ prefix: '/v1', rps: 20, burst: 40, key: { type: 'ip_address' } }],
      entry: [0],
      rollout: expect.objectContaining({ coherence: 'independent' }),
      // The router's: the model's chat completion, which the gateways go on sending after READY.
      probes: [expect.objectContaining({ method: 'post', url: '/v1/chat/completions', until_ready: false, timeout_s: 30 })],
    });
    // The group's own `ready` wins; the router gets the model's chat-completion probe; decode (no probe of its own) its port.
    expect(run.groups[1]?.ready?.check).toEqual({ kind: 'http', port: 8000, path: '/health' });
    expect(run.groups[0]?.ready?.check).toMatchObject({ kind: 'http', port: 8000, path: '/v1/chat/completions', method: 'POST' });
    expect(run.groups[2]?.ready).toEqual({ check: { kind: 'tcp', port: 8000 }, interval_s: 1, timeout_s: SERVICE_READY_TIMEOUT_S });
    expect(run.groups[2]?.depends_on).toEqual([1]);
    expect(run.groups[2]?.on_failure?.action).toBe('restart-node');
  });

  it('without a router every group is an entry; a probe keeps its method, headers and body', () => {
    const run = plan(
      [
        'type: service',
        'port: 9000',
        'auth: false',
        'probes: [{type: http, url: /ready, method: put, headers: [{name: X-A, value: b}], body: hi}]',
        'groups:',
        '  - {name: a, replicas: 2, commands: [serve]}',
        '  - {name: b, replicas: 1..3, scaling: {metric: concurrency, target: 5}, commands: [serve]}',
      ].join('\n'),
      null,
    );
    expect(run.service?.entry).toEqual([0, 1]);
    expect(run.groups[1]?.nodes_range).toEqual({ min: 1, max: 3 });
    expect(run.service?.auth).toBeNull();
    expect(run.groups[0]?.ready?.check).toEqual({ kind: 'http', port: 9000, path: '/ready', method: 'PUT', headers: [{ name: 'X-A', value: 'b' }], body: 'hi' });
  });

  it('starts a group that scales to zero with no node, at the entry or behind a router; refuses auth without a token', () => {
    const zero = plan('type: service\nport: 80\nauth: false\ncommands: [a]\nreplicas: 0..2\nscaling: {metric: rps, target: 1}\n', null);
    expect(zero.groups[0]).toMatchObject({ nodes: 0, nodes_range: { min: 0, max: 2 } });
    expect(zero.jobs).toEqual([]);
    expect(zero.nodes_num).toBe(0);
    const behind = 'type: service\nport: 80\nauth: false\ngroups:\n  - {name: r, replicas: 1, router: {type: smg}, commands: [r]}\n  - {name: d, replicas: 0..2, scaling: {metric: rps, target: 1}, commands: [d]}\n';
    const pd = plan(behind, null);
    expect(pd.groups.map((g) => g.nodes)).toEqual([1, 0]);
    expect(pd.jobs.map((j) => j.node_group_name)).toEqual(['r']);
    expect(pd.service?.entry).toEqual([0]);
    // A plan started straight on Temporal may not start a task's group, or a service's group without a range from 0, with no node.
    expect(PlanSchema.safeParse({ ...zero, service: undefined }).error?.issues[0]?.message).toMatch(/group 0 starts with no node: only a service's group that scales from zero/);
    expect(PlanSchema.safeParse({ ...zero, groups: [{ ...zero.groups[0], nodes_range: null }] }).success).toBe(false);
    expect(() => plan('type: service\nport: 80\ncommands: [a]\n', null)).toThrow(/needs at least one token hash/);
  });
});
