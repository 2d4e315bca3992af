import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadServicePlan, ServicePlanSchema } from '../../src/plan';
import {
  anyValueArb,
  configTextArbs,
  durationArb,
  FILE,
  freeTextArb,
  fuzzParams,
  groupNameArb,
  outcome,
  portArb,
  readyArb,
  resourcesArb,
  toYaml,
  watchdog,
  yamlStyleArb,
} from './fuzz-config-arbitraries';

/**
 * Generated and mutated service configs into the service planner: every input ends in a plan that
 * passes its schema and is plain JSON, or in a one-line ConfigError pointing into the file.
 */

beforeAll(() => watchdog.start());
afterAll(() => watchdog.stop());

const pick = <T extends unknown[]>(...values: T) => fc.constantFrom(...values);
/** Usually `valid`, sometimes one of the mistakes users make: most generated services plan. */
const mostly = <T, U>(valid: fc.Arbitrary<T>, mistake: fc.Arbitrary<U>) => fc.oneof({ arbitrary: valid, weight: 60 }, { arbitrary: mistake, weight: 1 });

const fixedArb = mostly(fc.integer({ min: 1, max: 6 }), pick(0, -1, '2..', [{ replicas: 1 }]));
const rangeArb = mostly(pick('1..3', '..4', '0..2', { min: 1, max: 3 }), pick('3..1', '-1..2', '2..'));
const scalingArb = fc.record(
  {
    metric: mostly(pick('rps', 'concurrency'), pick('cpu')),
    target: mostly(fc.double({ min: 0.1, max: 50, noNaN: true }), pick(0, -1, 'x')),
    window: mostly(pick(30, '1m', '5m'), pick(45, 'forever')),
    scale_up_delay: mostly(pick(0, '30s', '5m'), durationArb),
    scale_down_delay: mostly(pick(0, '30s', '10m'), durationArb),
  },
  { requiredKeys: ['metric', 'target'] },
);
/** `replicas` alone, or a range with `scaling` (dstack's pairing), now and then the wrong way round. */
const replicasArb = mostly(
  fc.oneof(fixedArb.map((replicas) => ({ replicas })), fc.tuple(rangeArb, scalingArb).map(([replicas, scaling]) => ({ replicas, scaling }))),
  fc.oneof(rangeArb.map((replicas) => ({ replicas })), fc.tuple(fixedArb, scalingArb).map(([replicas, scaling]) => ({ replicas, scaling }))),
);
const probeArb = fc.record(
  {
    type: mostly(pick('http'), pick('exec')),
    url: mostly(pick('/', '/health'), pick('health', '/a b', '')),
    method: mostly(pick('post', 'put'), pick('get', 'options')),
    headers: fc.array(fc.record({ name: mostly(pick('A', 'Content-Type'), pick('')), value: mostly(pick('b'), pick('')) }), { maxLength: 3 }),
    body: mostly(pick('{}', 'x'), pick('')),
    timeout: mostly(pick(1, '10s', '5m'), durationArb),
    interval: mostly(pick(1, '15s'), durationArb),
    ready_after: mostly(fc.integer({ min: 1, max: 3 }), pick(0, -1)),
    until_ready: mostly(fc.boolean(), pick('maybe', 2)),
  },
  { requiredKeys: ['type'] },
);
const rateLimitArb = fc.record(
  {
    prefix: mostly(fc.stringMatching(/^\/[a-z0-9/]{0,8}$/), pick('v1', '/a{b}')),
    rps: mostly(fc.double({ min: 0.02, max: 100, noNaN: true }), pick(0, '1', 1e30)),
    burst: mostly(fc.integer({ min: 0, max: 10 }), pick(-1)),
    key: mostly(pick({ type: 'ip_address' }, { type: 'header', header: 'X-Key' }), pick({ type: 'header', header: 'a b' }, { type: 'cookie' }, 'ip')),
  },
  { requiredKeys: ['rps'] },
);
const rolloutArb = fc.record({
  coherence: mostly(pick('revision'), pick('independent', 'blue-green')),
  max_surge: mostly(pick(1, 3, '50%', '100%'), pick(0, '150%', 'all')),
  steps: mostly(fc.integer({ min: 1, max: 4 }), pick(0, 'two')),
  canary: mostly(fc.record({ traffic: mostly(pick(10, '5%', 99), pick(0, 100, '0%')), soak: mostly(pick(30, '5m'), durationArb) }), pick(null, { traffic: 10 })),
  gates: mostly(
    fc.record({ error_rate: mostly(pick(0, 0.05, 1), pick(2, -0.1)), p95_factor: mostly(pick(1.5, 3), pick(1, 0)), progress_deadline: mostly(pick('10m', 60), durationArb) }, { requiredKeys: [] }),
    pick(null, 'strict'),
  ),
  rollback: mostly(pick('auto', 'manual'), pick('never')),
  drain_timeout: mostly(pick(0, '30s'), durationArb),
}, { requiredKeys: [] });
const commandsArb = fc.array(
  mostly(freeTextArb, fc.tuple(fc.nat(3), pick('replicas', 'nodes'), fc.nat(3)).map(([g, m, j]) => `echo \${{ groups[${g}].${m}[${j}].IP_ADDRESS }}`)),
  { minLength: 1, maxLength: 3 },
);
const groupArb = fc
  .tuple(
    replicasArb,
    fc.record(
      {
        name: groupNameArb,
        resources: resourcesArb,
        commands: commandsArb,
        image: mostly(pick('nginx:1.27', 'lmsysorg/sglang:latest'), pick('--privileged')),
        router: mostly(pick({ type: 'smg' }, { type: 'dynamo' }, { type: 'sglang' }, {}), pick({ type: 'nginx' })),
        depends_on: fc.array(groupNameArb, { maxLength: 1 }),
        ready: readyArb,
        on_failure: mostly(pick('restart-node', 'fail-run'), pick('explode')),
      },
      { requiredKeys: ['commands'] },
    ),
  )
  .map(([replicas, group]) => ({ ...group, ...replicas }));
const serviceArb = fc
  .tuple(
    fc.oneof(replicasArb, fc.array(groupArb, { minLength: 1, maxLength: 4 }).map((groups) => ({ groups }))),
    fc.record(
      {
        name: mostly(pick('svc', 'pd-service'), pick('Bad_Name')),
        port: mostly(fc.oneof(fc.integer({ min: 1, max: 65535 }), pick('80:8000', { container_port: 9000 })), portArb),
        auth: mostly(fc.boolean(), pick('maybe')),
        strip_prefix: fc.boolean(),
        model: mostly(pick('m', { name: 'm', format: 'openai', prefix: '/api' }), pick({ name: 'm', format: 'tgi' }, 42)),
        rate_limits: fc.array(rateLimitArb, { maxLength: 3 }),
        probes: fc.array(probeArb, { maxLength: 3 }),
        commands: commandsArb,
        env: mostly(pick(['A=1'], { B: 'x' }), pick(['MISSING'])),
        startup_order: mostly(pick('any', 'master-first'), pick('sideways')),
        resources: resourcesArb,
        rollout: rolloutArb,
      },
      { requiredKeys: ['port'] },
    ),
    // Now and then a dstack field Troupe does not read (yet).
    mostly(fc.constant<Record<string, unknown>>({}), fc.constantFrom<Record<string, unknown>>({ gateway: false }, { spot_policy: 'auto' })),
  )
  .map(([shape, service, unread]) => {
    // Groups take their own commands; a service without groups takes the top-level ones.
    const { commands, ...rest } = service;
    return { type: 'service', ...rest, ...shape, ...('groups' in shape ? {} : { commands }), ...unread };
  });

/** Plans the text; true when it planned (and the plan keeps its invariants). */
function plan(text: string): boolean {
  const result = outcome(text, () => loadServicePlan(text, FILE, { environ: {} }));
  if (!result.ok) return false;
  const schema = ServicePlanSchema.safeParse(result.value);
  if (!schema.success) throw new Error(`the service plan fails its schema: ${schema.error.message}\n${text}`);
  if (!isDeepStrictEqual(JSON.parse(JSON.stringify(result.value)), result.value)) throw new Error(`the service plan is not plain JSON\n${text}`);
  const routers = result.value.groups.filter((g) => g.router !== null);
  if (routers.length > 1 || routers.some((g) => g.replicas.min !== 1 || g.replicas.max !== 1)) throw new Error(`router rule broken\n${text}`);
  return true;
}

describe('fuzz: service configs into loadServicePlan', () => {
  const texts = configTextArbs(serviceArb);

  it.each([
    ['generated services', texts.generated],
    ['structurally mutated services (keys deleted, retyped, swapped, added)', texts.structural],
    ['textually mutated services (truncated, bytes flipped, YAML syntax inserted)', texts.textual],
  ])('%s: a plan or a one-line refusal', (what, arb) => {
    let planned = 0;
    fc.assert(
      fc.property(arb, (text) => {
        if (plan(text)) planned += 1;
      }),
      fuzzParams(800),
    );
    // Most generated services are valid: the fuzz reaches the planner's defaults, not only its refusals.
    if (what === 'generated services') expect(planned).toBeGreaterThan(100);
  });

  it('any value in any field: a plan or a one-line refusal', () => {
    const fields = ['port', 'auth', 'strip_prefix', 'model', 'rate_limits', 'probes', 'replicas', 'scaling', 'groups', 'rollout'];
    fc.assert(
      fc.property(fc.dictionary(fc.constantFrom(...fields), anyValueArb), yamlStyleArb, (extra, style) => {
        plan(toYaml({ type: 'service', port: 8000, commands: ['a'], ...extra }, style));
      }),
      fuzzParams(1_000),
    );
  });
});
