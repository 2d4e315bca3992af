import { describe, expect, it } from 'vitest';
import { loadServicePlan, serviceRunPlan } from '../../src/plan';
import { canonicalJson, serviceRevision } from '../../src/plan/revision';

/** A service's revision: new when a replica would behave otherwise, the same when only its counts change. */

function revision(lines: string[], environ: Record<string, string> = {}): string {
  return loadServicePlan(['type: service', 'port: 8000', 'auth: false', ...lines].join('\n'), 'svc.yml', { environ, runName: 'svc' }).revision;
}

const pd = (prefill = 'replicas: 1..4, scaling: {metric: rps, target: 10}', decode = 'commands: [decode]', top: string[] = []) => [
  ...top,
  'groups:',
  '  - {name: router, replicas: 1, router: {}, commands: [route]}',
  `  - {name: prefill, ${prefill}, commands: [prefill]}`,
  `  - {name: decode, replicas: 2, ${decode}}`,
];

describe('serviceRevision', () => {
  const base = revision(pd());

  it('is 12 lowercase hex characters, and the same for the same config', () => {
    expect(base).toMatch(/^[0-9a-f]{12}$/);
    expect(revision(pd())).toBe(base);
  });

  it('is what the run plan carries', () => {
    const service = loadServicePlan(['type: service', 'port: 8000', 'auth: false', ...pd()].join('\n'), 'svc.yml', { environ: {} });
    expect(serviceRunPlan(service, null).service?.revision).toBe(service.revision);
    expect(serviceRevision(service)).toBe(service.revision);
  });

  it.each<[string, string[]]>([
    ['commands', pd(undefined, 'commands: [decode, --fast]')],
    ['image', pd(undefined, 'image: "vllm/vllm:1"')],
    ['resources', pd(undefined, 'commands: [decode], resources: {gpu: 1}')],
    ['a ready probe', pd(undefined, 'commands: [decode], ready: {http: 8000}')],
    ['a group name', pd(undefined, 'commands: [decode]').map((l) => l.replace('name: decode', 'name: decoder'))],
    ['the router type', pd().map((l) => l.replace('router: {}', 'router: {type: dynamo}'))],
    ['an env value', pd(undefined, undefined, ['env: [MODE=b]'])],
    ['a probe', pd(undefined, undefined, ['probes: [{type: http, url: /health}]'])],
    ['the probe interval', pd(undefined, undefined, ['probes: [{type: http, url: /health, interval: 5}]'])],
    ['working_dir', pd(undefined, undefined, ['working_dir: /srv'])],
  ])('changes with %s', (_what, lines) => {
    expect(revision(lines)).not.toBe(base);
  });

  it('changes with the port', () => {
    expect(loadServicePlan(['type: service', 'port: 9000', 'auth: false', ...pd()].join('\n'), 'svc.yml', { environ: {} }).revision).not.toBe(base);
  });

  it.each<[string, string[]]>([
    ['the replicas of a range', pd('replicas: 2..8, scaling: {metric: rps, target: 10}')],
    ['scaling', pd('replicas: 1..4, scaling: {metric: rps, target: 3, window: 5m, scale_down_delay: 1h}')],
    ['a fixed count of replicas', pd(undefined, 'commands: [decode]').map((l) => l.replace('replicas: 2', 'replicas: 5'))],
    ['the run name', pd(undefined, undefined, ['name: other'])],
    ['the order of keys', pd().map((l) => l.replace('{name: router, replicas: 1, router: {}, commands: [route]}', '{commands: [route], router: {}, replicas: 1, name: router}'))],
    ['gateway settings (rate limits, strip_prefix)', pd(undefined, undefined, ['strip_prefix: false', 'rate_limits: [{rps: 5}]'])],
  ])('stays the same with %s', (_what, lines) => {
    expect(revision(lines)).toBe(base);
  });

  it('gives the old revision back when a change is reverted', () => {
    const changed = revision(pd(undefined, 'image: "vllm/vllm:2"'));
    expect(changed).not.toBe(base);
    expect(revision(pd())).toBe(base);
    expect(revision(pd(undefined, 'image: "vllm/vllm:2"'))).toBe(changed);
  });

  it("counts a secret by its name, not its value (sealed anew on each apply)", () => {
    const withToken = (value: string) => revision(pd(undefined, undefined, ['env: [HF_TOKEN]']), { HF_TOKEN: value });
    expect(withToken('one')).toBe(withToken('two'));
    expect(withToken('one')).not.toBe(base);
    const declared = (value: string) => revision(pd(undefined, undefined, ['env: [MODE]', 'secret_env: [MODE]']), { MODE: value });
    expect(declared('a')).toBe(declared('b'));
    // The same name and value not secret is a different revision: the value counts then.
    expect(revision(pd(undefined, undefined, ['env: [MODE=a]']))).not.toBe(revision(pd(undefined, undefined, ['env: [MODE=b]'])));
  });
});

describe('canonicalJson', () => {
  it('sorts keys at every depth, keeps array order, drops undefined fields', () => {
    expect(canonicalJson({ b: 1, a: { d: [2, 1], c: null, e: undefined } })).toBe('{"a":{"c":null,"d":[2,1]},"b":1}');
    expect(canonicalJson({ x: 'é"' })).toBe(JSON.stringify({ x: 'é"' }));
    expect(canonicalJson([undefined])).toBe('[null]');
  });
});
