import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, it } from 'vitest';
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
const replicasArb = fc.oneof(fc.integer({ min: 0, max: 6 }), pick('1..3', '..4', '0..2', '2..', '3..1', { max: 3 }, '-1..2', [{ replicas: 1 }]));
const scalingArb = fc.record(
  { metric: pick('rps', 'cpu'), target: fc.oneof(fc.double({ min: -1, max: 50, noNaN: true }), pick('5', 'x')), window: fc.oneof(pick(30, '1m', '5m', 45), durationArb), scale_up_delay: durationArb, scale_down_delay: durationArb },
  { requiredKeys: ['metric', 'target'] },
);
const probeArb = fc.record(
  {
    type: pick('http', 'exec'),
    url: pick('/', '/health', 'health', '/a b', ''),
    method: pick('get', 'post', 'head', 'options'),
    headers: fc.array(fc.record({ name: pick('A', '', 'Content-Type'), value: pick('b', '') }), { maxLength: 3 }),
    body: pick('{}', '', 'x'),
    timeout: durationArb,
    interval: durationArb,
    ready_after: fc.integer({ min: -1, max: 3 }),
    until_ready: fc.oneof(fc.boolean(), pick('yes', 2)),
  },
  { requiredKeys: ['type'] },
);
const rateLimitArb = fc.record(
  { prefix: pick('/', '/v1', 'v1', '/a{b}'), rps: fc.oneof(fc.double({ min: 0, max: 100, noNaN: true }), pick('1', 1e30)), burst: fc.integer({ min: -1, max: 10 }), key: pick({ type: 'ip_address' }, { type: 'header', header: 'X-Key' }, { type: 'header', header: 'a b' }, { type: 'cookie' }, 'ip') },
  { requiredKeys: ['rps'] },
);
const commandsArb = fc.array(
  fc.oneof(freeTextArb, fc.tuple(fc.nat(3), pick('replicas', 'nodes'), fc.nat(3)).map(([g, m, j]) => `echo \${{ groups[${g}].${m}[${j}].IP_ADDRESS }}`)),
  { maxLength: 3 },
);
const groupArb = fc.record(
  {
    name: groupNameArb,
    replicas: replicasArb,
    count: replicasArb,
    scaling: scalingArb,
    resources: resourcesArb,
    commands: commandsArb,
    image: pick('nginx:1.27', 'lmsysorg/sglang:latest', '--privileged'),
    router: pick({}, { type: 'smg' }, { type: 'dynamo' }, { type: 'sglang' }, { type: 'nginx' }, null),
    depends_on: fc.array(groupNameArb, { maxLength: 2 }),
    ready: readyArb,
    on_failure: pick('restart-node', 'fail-run', 'explode'),
    on_peers_change: pick('kill -HUP 1', ''),
    spot_policy: pick('auto'),
  },
  { requiredKeys: [] },
);
const serviceArb = fc.record(
  {
    type: pick('service'),
    name: pick('svc', 'pd-service', 'Bad_Name'),
    port: portArb,
    auth: fc.oneof(fc.boolean(), pick('maybe')),
    strip_prefix: fc.boolean(),
    model: pick('m', { name: 'm', format: 'openai', prefix: '/api' }, { name: 'm', format: 'tgi' }, 42),
    rate_limits: fc.array(rateLimitArb, { maxLength: 3 }),
    probes: fc.array(probeArb, { maxLength: 3 }),
    replicas: replicasArb,
    scaling: scalingArb,
    groups: fc.array(groupArb, { maxLength: 4 }),
    image: pick('nginx:1.27', null),
    commands: commandsArb,
    env: pick(['A=1'], { B: 'x' }, ['MISSING']),
    startup_order: pick('any', 'master-first', 'sideways'),
    resources: resourcesArb,
    gateway: pick(false),
  },
  { requiredKeys: ['type'] },
);

function plan(text: string): void {
  const result = outcome(text, () => loadServicePlan(text, FILE, { environ: {} }));
  if (!result.ok) return;
  const schema = ServicePlanSchema.safeParse(result.value);
  if (!schema.success) throw new Error(`the service plan fails its schema: ${schema.error.message}\n${text}`);
  if (!isDeepStrictEqual(JSON.parse(JSON.stringify(result.value)), result.value)) throw new Error(`the service plan is not plain JSON\n${text}`);
  const routers = result.value.groups.filter((g) => g.router !== null);
  if (routers.length > 1 || routers.some((g) => g.replicas.min !== 1 || g.replicas.max !== 1)) throw new Error(`router rule broken\n${text}`);
}

describe('fuzz: service configs into loadServicePlan', () => {
  const texts = configTextArbs(serviceArb);

  it.each([
    ['generated services', texts.generated],
    ['structurally mutated services (keys deleted, retyped, swapped, added)', texts.structural],
    ['textually mutated services (truncated, bytes flipped, YAML syntax inserted)', texts.textual],
  ])('%s: a plan or a one-line refusal', (_what, arb) => {
    fc.assert(fc.property(arb, plan), fuzzParams(800));
  });

  it('any value in any field: a plan or a one-line refusal', () => {
    const fields = ['port', 'auth', 'strip_prefix', 'model', 'rate_limits', 'probes', 'replicas', 'scaling', 'groups'];
    fc.assert(
      fc.property(fc.dictionary(fc.constantFrom(...fields), anyValueArb), yamlStyleArb, (extra, style) =>
        plan(toYaml({ type: 'service', port: 8000, commands: ['a'], ...extra }, style)),
      ),
      fuzzParams(1_000),
    );
  });
});
