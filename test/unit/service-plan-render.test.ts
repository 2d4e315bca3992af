import { describe, expect, it } from 'vitest';
import { plain } from '../../src/cli/render/style';
import { renderServicePlan } from '../../src/cli/render/service-plan-table';
import { loadServicePlan } from '../../src/plan';

/** What `troupe plan` shows of a service's revision, rollout and scaling metric. */

const render = (...lines: string[]) =>
  renderServicePlan(loadServicePlan(['type: service', 'name: svc', 'port: 8000', ...lines].join('\n'), 'svc.yml', { environ: {} }), plain).join('\n');

describe('troupe plan of a service', () => {
  it('shows the revision', () => {
    const plan = loadServicePlan('type: service\nport: 8000\ncommands: [a]\n', 'svc.yml', { environ: {} });
    expect(render('commands: [a]')).toMatch(new RegExp(`^ Revision +${plan.revision}$`, 'm'));
  });

  it('shows a coherent rollout with its canary, gates, rollback and drain', () => {
    const out = render(
      'commands: [a]',
      'rollout: {coherence: revision, max_surge: 2, steps: 2, canary: {traffic: 10, soak: 90}, gates: {error_rate: 0.07, progress_deadline: 5m}, rollback: manual, drain_timeout: 45s}',
    );
    expect(out).toMatch(
      /^ Rollout +revision: surge 2 replica\(s\), 2 step\(s\); canary 10% for 1m 30s; gates: errors <= 7%, p95 <= 2x the old, progress within 5m 00s; rollback manual; drain 45s$/m,
    );
  });

  it('shows the scaling metric of each group: rps, or concurrency', () => {
    const out = render(
      'groups:',
      '  - {name: a, replicas: 1..4, scaling: {metric: concurrency, target: 8}, commands: [a]}',
      '  - {name: b, replicas: 1..2, scaling: {metric: rps, target: 5}, commands: [b]}',
    );
    expect(out).toMatch(/^ a +1\.\.4 \(concurrency 8\/replica\) /m);
    expect(out).toMatch(/^ b +1\.\.2 \(rps 5\/replica\) /m);
    expect(out).toMatch(/^ Scaling a +concurrency target 8 over 60s; up after 5m 00s, down after 10m 00s$/m);
  });

  it("names where a group behind the router reads its own traffic", () => {
    const out = render(
      'groups:',
      '  - {name: r, replicas: 1, router: {}, commands: [r]}',
      '  - {name: d, replicas: 0..2, scaling: {metric: rps, target: 5, replica_metrics: {port: 9000, requests: "vllm:request_success_total"}}, commands: [d]}',
    );
    expect(out).toMatch(/^ Scaling d +rps target 5 over 60s; up after 5m 00s, down after 10m 00s; at zero, requests held up to 5m 00s; its own traffic: vllm:request_success_total on each replica's :9000\/metrics$/m);
  });
});
