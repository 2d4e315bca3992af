import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors';
import { loadPlan, loadServicePlan, type ServicePlan } from '../../src/plan';

/** Service configs as dstack 0.22.5 reads them: each field's default, each refusal as one file:line:col line. */

const FILE = 'service.yml';

function yaml(...lines: string[]): string {
  return `${lines.join('\n')}\n`;
}

/** A minimal valid service plus `lines`. */
function svc(...lines: string[]): string {
  return yaml('type: service', 'port: 8000', ...lines);
}

function load(text: string, environ: Record<string, string> = {}): ServicePlan {
  return loadServicePlan(text, FILE, { environ, runName: 'svc' });
}

function refusal(text: string): string {
  try {
    load(text);
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  throw new Error('expected a refusal');
}

const groups3 = [
  'groups:',
  '  - name: router',
  '    replicas: 1',
  '    router: {type: smg}',
  '    commands: [route]',
  '  - name: prefill',
  '    replicas: 1..4',
  '    scaling: {metric: rps, target: 10}',
  '    commands: [prefill]',
  '  - name: decode',
  '    count: 2',
  '    commands: [decode]',
];

describe('service defaults', () => {
  const plan = load(svc('commands: [serve]'));

  it.each<[string, (p: ServicePlan) => unknown, unknown]>([
    ['port is the container port', (p) => p.port, 8000],
    ['auth is on', (p) => p.auth, true],
    ['strip_prefix is on', (p) => p.strip_prefix, true],
    ['no model', (p) => p.model, null],
    ['no rate limits', (p) => p.rate_limits, []],
    ['one group "0"', (p) => p.groups.map((g) => g.name), ['0']],
    ['one replica', (p) => p.groups[0]?.replicas, { min: 1, max: 1 }],
    ['no scaling', (p) => p.groups[0]?.scaling, null],
    ['no router', (p) => p.router_group, null],
    ['no probes', (p) => p.groups[0]?.probes, []],
    ['commands as written', (p) => p.groups[0]?.commands, ['serve']],
    ['startup order any', (p) => p.startup_order, 'any'],
    ['default resources', (p) => p.groups[0]?.resources.cpu.count, { min: 2, max: null }],
  ])('%s', (_what, pick, expected) => {
    expect(pick(plan)).toEqual(expected);
  });

  it.each<[string, string[], (p: ServicePlan) => unknown, unknown]>([
    ['port "80:8000" uses the container port', ['port: "80:8000"'], (p) => p.port, 8000],
    ['port "8000" as a string', ['port: "8000"'], (p) => p.port, 8000],
    ['port as a mapping', ['port: {container_port: 9000}'], (p) => p.port, 9000],
    ['auth: false', ['auth: false'], (p) => p.auth, false],
    ['strip_prefix: false', ['strip_prefix: false'], (p) => p.strip_prefix, false],
    ['model name → OpenAI API at /v1', ['model: m'], (p) => p.model, { name: 'm', prefix: '/v1' }],
    ['model mapping', ['model: {name: m, format: openai, prefix: /api}'], (p) => p.model, { name: 'm', prefix: '/api' }],
    ['replicas N', ['replicas: 3'], (p) => p.groups[0]?.replicas, { min: 3, max: 3 }],
    ['replicas 0', ['replicas: 0'], (p) => p.groups[0]?.replicas, { min: 0, max: 0 }],
    ['replicas ..4 starts at 0', ['replicas: ..4', 'scaling: {metric: rps, target: 1}'], (p) => p.groups[0]?.replicas, { min: 0, max: 4 }],
    ['replicas {max: 3}', ['replicas: {max: 3}', 'scaling: {metric: rps, target: 1}'], (p) => p.groups[0]?.replicas, { min: 0, max: 3 }],
    [
      'scaling defaults: window 60s, up 5m, down 10m',
      ['replicas: 1..2', 'scaling: {metric: rps, target: 0.5}'],
      (p) => p.groups[0]?.scaling,
      { metric: 'rps', target: 0.5, window_s: 60, scale_up_delay_s: 300, scale_down_delay_s: 600 },
    ],
    [
      'scaling as written',
      ['replicas: 1..2', 'scaling: {metric: rps, target: 3, window: 5m, scale_up_delay: 30s, scale_down_delay: 1h}'],
      (p) => p.groups[0]?.scaling,
      { metric: 'rps', target: 3, window_s: 300, scale_up_delay_s: 30, scale_down_delay_s: 3600 },
    ],
    [
      "scaling on concurrency (Troupe's extension): target requests in flight per replica",
      ['replicas: 1..4', 'scaling: {metric: concurrency, target: 8, window: 30s}'],
      (p) => p.groups[0]?.scaling,
      { metric: 'concurrency', target: 8, window_s: 30, scale_up_delay_s: 300, scale_down_delay_s: 600 },
    ],
    [
      'rate limit defaults: prefix /, burst 0, by client address',
      ['rate_limits: [{rps: 1}]'],
      (p) => p.rate_limits,
      [{ prefix: '/', rps: 1, burst: 0, key: { type: 'ip_address' } }],
    ],
    [
      'rate limit by header',
      ['rate_limits: [{prefix: /v1, rps: 5, burst: 10, key: {type: header, header: X-Api-Key}}]'],
      (p) => p.rate_limits[0]?.key,
      { type: 'header', header: 'X-Api-Key' },
    ],
    [
      'probe defaults: GET / every 15s, timeout 10s, ready after 1',
      ['probes: [{type: http}]'],
      (p) => p.groups[0]?.probes,
      [{ type: 'http', url: '/', method: 'get', headers: [], body: null, timeout_s: 10, interval_s: 15, ready_after: 1, until_ready: false }],
    ],
    [
      'probe as written',
      ['probes: [{type: http, url: /health, method: post, headers: [{name: A, value: b}], body: "{}", timeout: 5m, interval: 2, ready_after: 3, until_ready: true}]'],
      (p) => p.groups[0]?.probes[0],
      { type: 'http', url: '/health', method: 'post', headers: [{ name: 'A', value: 'b' }], body: '{}', timeout_s: 300, interval_s: 2, ready_after: 3, until_ready: true },
    ],
    ['a model gives a chat-completion probe', ['model: m'], (p) => [p.groups[0]?.probes[0]?.url, p.groups[0]?.probes[0]?.timeout_s], ['/v1/chat/completions', 30]],
    ['explicit empty probes override the model probe', ['model: m', 'probes: []'], (p) => p.groups[0]?.probes, []],
    ['image alone is enough (no commands)', ['image: lmsysorg/sglang:latest'], (p) => p.groups[0]?.image, 'lmsysorg/sglang:latest'],
  ])('%s', (_what, lines, pick, expected) => {
    const base = lines.some((l) => l.startsWith('port:')) ? yaml('type: service', 'commands: [serve]', ...lines) : svc('commands: [serve]', ...lines);
    expect(pick(load(base))).toEqual(expected);
  });
});

describe('replica groups', () => {
  const plan = load(svc('model: m', ...groups3));

  it('names, replicas, scaling and the router group as dstack reads them', () => {
    expect(plan.groups.map((g) => [g.name, g.replicas, g.router, g.scaling?.target ?? null])).toEqual([
      ['router', { min: 1, max: 1 }, 'smg', null],
      ['prefill', { min: 1, max: 4 }, null, 10],
      ['decode', { min: 2, max: 2 }, null, null],
    ]);
    expect(plan.router_group).toBe(0);
  });

  it('gives only the router group the model probe', () => {
    expect(plan.groups.map((g) => g.probes.length)).toEqual([1, 0, 0]);
  });

  it('names a group without a name by its index, and reads `sglang` as smg', () => {
    const p = load(svc('groups:', '  - {replicas: 1, router: {type: sglang}, commands: [a]}', '  - {replicas: 1, router: null, commands: [b]}'));
    expect(p.groups.map((g) => [g.name, g.router])).toEqual([
      ['0', 'smg'],
      ['1', null],
    ]);
  });

  it('takes the service image in groups without one, and a group image', () => {
    const p = load(svc('groups:', '  - {replicas: 1, image: "a/b:1"}', '  - {replicas: 1, commands: [x]}'));
    expect(p.groups.map((g) => g.image)).toEqual(['a/b:1', null]);
  });

  it("accepts Troupe's group extensions and checks them as on tasks", () => {
    const p = load(
      svc(
        'groups:',
        '  - {name: prefill, replicas: 2, commands: [p], ready: {http: 8000, min: 1}}',
        '  - {name: decode, replicas: 1, commands: [d], depends_on: [prefill], on_failure: restart-node, on_peers_change: "kill -HUP 1", on_dependency_restart: restart}',
      ),
    );
    expect(p.groups[1]).toMatchObject({ depends_on: [0], on_dependency_restart: 'restart', on_peers_change: 'kill -HUP 1', on_failure: { action: 'restart-node' } });
    expect(p.groups[0]?.ready_min).toEqual({ kind: 'count', value: 1 });
    expect(load(svc('startup_order: master-first', ...groups3)).startup_order).toBe('master-first');
  });

  it('lets commands name replicas every group starts with', () => {
    const cmd = 'serve --peer ${{ groups[2].replicas[1].IP_ADDRESS }} --prefill ${{ groups[1].replicas[0].IP_ADDRESS }}';
    const p = load(svc('groups:', '  - {replicas: 1, router: {}, commands: [r]}', '  - {replicas: 1..4, scaling: {metric: rps, target: 1}, commands: [p]}', `  - {replicas: 2, commands: ["${cmd}"]}`));
    expect(p.groups[2]?.commands).toEqual([cmd]);
  });
});

describe('service refusals: one line at file:line:col naming the field', () => {
  it.each<[string, string, string]>([
    ['no port', yaml('type: service', 'commands: [a]'), 'service.yml:1:1: port: required field is missing'],
    ['port 0', yaml('type: service', 'port: 0', 'commands: [a]'), 'service.yml:2:7: port: the port must be a port number 1..65535, got a number (0)'],
    ['port 70000', yaml('type: service', 'port: 70000', 'commands: [a]'), 'service.yml:2:7: port: the port must be a port number 1..65535, got a number (70000)'],
    ['port "*:8000"', yaml('type: service', 'port: "*:8000"', 'commands: [a]'), 'service.yml:2:7: port: expected a port such as 8000 or "80:8000", got a string ("*:8000"): a service has no local port to pick'],
    ['neither commands nor image', svc(), 'service.yml:1:1: commands: either `commands` or `image` must be set'],
    ['auth not a boolean', svc('commands: [a]', 'auth: maybe'), 'service.yml:4:7: auth: expected true or false, got a string ("maybe")'],
    ['a replica range without scaling', svc('commands: [a]', 'replicas: 1..3'), 'service.yml:4:11: replicas: replicas 1..3 is a range: add `scaling` (metric: rps, target), or give a fixed count'],
    ['scaling with a fixed count', svc('commands: [a]', 'replicas: 2', 'scaling: {metric: rps, target: 1}'), 'service.yml:5:1: scaling: `scaling` needs `replicas` to be a range such as 1..4 (replicas is 2)'],
    ['scaling without replicas', svc('commands: [a]', 'scaling: {metric: rps, target: 1}'), 'service.yml:4:1: scaling: `scaling` needs `replicas` to be a range such as 1..4 (replicas is 1)'],
    ['replicas without a maximum', svc('commands: [a]', 'replicas: 1..', 'scaling: {metric: rps, target: 1}'), 'service.yml:4:11: replicas: the maximum number of replicas is required: write N or MIN..MAX, e.g. 1..4'],
    ['replicas min above max', svc('commands: [a]', 'replicas: 3..1', 'scaling: {metric: rps, target: 1}'), 'service.yml:4:11: replicas: range 3..1 has its minimum above its maximum'],
    ['negative replicas', svc('commands: [a]', 'replicas: "-1..2"', 'scaling: {metric: rps, target: 1}'), 'service.yml:4:11: replicas: "-1" is negative: counts and sizes are 0 or more'],
    ['scaling metric', svc('commands: [a]', 'replicas: 1..2', 'scaling: {metric: cpu, target: 1}'), 'service.yml:5:19: scaling.metric: expected rps (requests per second per replica) or concurrency (requests in flight per replica), got a string ("cpu")'],
    ['scaling target 0', svc('commands: [a]', 'replicas: 1..2', 'scaling: {metric: rps, target: 0}'), 'service.yml:5:32: scaling.target: expected a number > 0 (requests per second, or in flight, per replica), got a number (0)'],
    ['scaling window', svc('commands: [a]', 'replicas: 1..2', 'scaling: {metric: rps, target: 1, window: 45}'), 'service.yml:5:43: scaling.window: the window must be one of 30s, 60s, 300s, got a number (45)'],
    ['negative scaling delay (Troupe)', svc('commands: [a]', 'replicas: 1..2', 'scaling: {metric: rps, target: 1, scale_up_delay: -5}'), 'service.yml:5:51: scaling.scale_up_delay: a delay cannot be negative, got a number (-5): write 0 for none'],
    ['rate limit rps too low', svc('commands: [a]', 'rate_limits: [{rps: 0.001}]'), 'service.yml:4:21: rate_limits[0].rps: expected a number of requests per second, 1/60..153722867280912930, got a number (0.001)'],
    ['rate limit prefix', svc('commands: [a]', 'rate_limits: [{rps: 1, prefix: v1}]'), 'service.yml:4:32: rate_limits[0].prefix: "v1" is not a path prefix: start with / and use no spaces, \\, { or }'],
    ['rate limit header name', svc('commands: [a]', 'rate_limits: [{rps: 1, key: {type: header, header: "X Key"}}]'), 'service.yml:4:52: rate_limits[0].key.header: expected a header name (letters, digits, - and _, at most 500), got a string ("X Key")'],
    ['rate limit key type', svc('commands: [a]', 'rate_limits: [{rps: 1, key: {type: cookie}}]'), 'service.yml:4:36: rate_limits[0].key.type: expected ip_address or header, got a string ("cookie")'],
    ['negative burst', svc('commands: [a]', 'rate_limits: [{rps: 1, burst: -1}]'), 'service.yml:4:31: rate_limits[0].burst: expected an integer >= 0, got a number (-1)'],
    ['two limits on one prefix', svc('commands: [a]', 'rate_limits: [{rps: 1}, {rps: 2, prefix: /}]'), 'service.yml:4:25: rate_limits[1]: prefix / has a rate limit already (rate_limits[0]): one limit per prefix'],
    ['probe without type', svc('commands: [a]', 'probes: [{url: /health}]'), 'service.yml:4:10: probes[0].type: required field is missing'],
    ['probe url without /', svc('commands: [a]', 'probes: [{type: http, url: health}]'), 'service.yml:4:28: probes[0].url: "health" is not a URL path: start with / and use printable characters'],
    ['probe method', svc('commands: [a]', 'probes: [{type: http, method: options}]'), 'service.yml:4:31: probes[0].method: expected one of get, post, put, delete, patch, head, got a string ("options")'],
    ['probe body with get', svc('commands: [a]', 'probes: [{type: http, method: get, body: x}]'), 'service.yml:4:36: probes[0].body: a `get` probe cannot send a body: use method post (or put, patch, delete)'],
    ['probe timeout under 1s', svc('commands: [a]', 'probes: [{type: http, timeout: 0}]'), 'service.yml:4:32: probes[0].timeout: a probe timeout is at least 1s, got a number (0)'],
    ['probe timeout over 5m', svc('commands: [a]', 'probes: [{type: http, timeout: 301}]'), 'service.yml:4:32: probes[0].timeout: a probe timeout is at most 300s, got a number (301)'],
    ['probe interval under 1s', svc('commands: [a]', 'probes: [{type: http, interval: 0}]'), 'service.yml:4:33: probes[0].interval: a probe interval is at least 1s, got a number (0)'],
    ['probe ready_after 0', svc('commands: [a]', 'probes: [{type: http, ready_after: 0}]'), 'service.yml:4:36: probes[0].ready_after: expected an integer >= 1, got a number (0)'],
    ['empty header value', svc('commands: [a]', 'probes: [{type: http, headers: [{name: a, value: ""}]}]'), 'service.yml:4:50: probes[0].headers[0].value: a header value must be 1..2048 characters long, got 0'],
    ['the same probe twice', svc('commands: [a]', 'probes: [{type: http}, {type: http}]'), 'service.yml:4:24: probes[1]: the same probe as probes[0]: probes must be unique'],
    ['more than 10 probes', svc('commands: [a]', `probes: [${Array.from({ length: 11 }, (_, i) => `{type: http, url: /p${i}}`).join(', ')}]`), 'service.yml:4:9: probes: 11 probes: at most 10'],
    ['model format tgi', svc('commands: [a]', 'model: {name: m, format: tgi}'), 'service.yml:4:26: model.format: Troupe does not support the `tgi` model format: serve an OpenAI-compatible API and write `format: openai`'],
    ['groups and replicas', svc('replicas: 2', ...groups3), 'service.yml:3:1: replicas: `replicas` and `groups` are mutually exclusive: give each group its `replicas` instead'],
    ['groups and top-level commands', svc('commands: [a]', ...groups3), 'service.yml:3:1: commands: top-level `commands` is not allowed when `groups` is set: give each group its `commands`'],
    ['groups and top-level scaling', svc('scaling: {metric: rps, target: 1}', ...groups3), 'service.yml:3:1: scaling: top-level `scaling` is not allowed when `groups` is set: give each group its `scaling`'],
    ['empty groups', svc('groups: []'), 'service.yml:3:9: groups: `groups` cannot be empty: list at least one group, or remove it'],
    ['a group without replicas', svc('groups:', '  - {commands: [a]}'), 'service.yml:4:5: groups[0]: group "0" has no `replicas`: write replicas: N or MIN..MAX'],
    ['a group range without scaling', svc('groups:', '  - {replicas: 1..2, commands: [a]}'), 'service.yml:4:16: groups[0].replicas: replicas 1..2 is a range: add `scaling` (metric: rps, target), or give a fixed count'],
    ['replica_metrics on a single-group service', svc('commands: [a]', 'replicas: 1..2', 'scaling: {metric: rps, target: 1, replica_metrics: {port: 9000, requests: r}}'), 'service.yml:5:35: scaling.replica_metrics: the service takes the requests the gateways send, and they count its own traffic: `replica_metrics` is for a group behind the router'],
    ['replica_metrics on a group of a service without router', svc('groups:', '  - {name: w, replicas: 1..2, scaling: {metric: rps, target: 1, replica_metrics: {port: 9000, requests: r}}, commands: [b]}'), 'service.yml:4:65: groups[0].scaling.replica_metrics: group "w", an entry group, takes the requests the gateways send, and they count its own traffic: `replica_metrics` is for a group behind the router'],
    ['replica_metrics without the counter rps reads', svc('groups:', '  - {replicas: 1, router: {}, commands: [a]}', '  - {name: w, replicas: 1..2, scaling: {metric: rps, target: 1, replica_metrics: {port: 9000, inflight: g}}, commands: [b]}'), 'service.yml:5:82: groups[1].scaling.replica_metrics: `metric: rps` reads a counter of the requests each replica answered: name it in `requests` (e.g. vllm:request_success_total)'],
    ['replica_metrics without the gauge concurrency reads', svc('groups:', '  - {replicas: 1, router: {}, commands: [a]}', '  - {name: w, replicas: 1..2, scaling: {metric: concurrency, target: 1, replica_metrics: {port: 9000, requests: r}}, commands: [b]}'), 'service.yml:5:90: groups[1].scaling.replica_metrics: `metric: concurrency` reads a gauge of the requests each replica is serving: name it in `inflight` (e.g. vllm:num_requests_running)'],
    ['a replica_metrics name', svc('groups:', '  - {replicas: 1, router: {}, commands: [a]}', '  - {name: w, replicas: 1..2, scaling: {metric: rps, target: 1, replica_metrics: {port: 9000, requests: "a b"}}, commands: [b]}'), 'service.yml:5:105: groups[1].scaling.replica_metrics.requests: expected a Prometheus metric name such as vllm:num_requests_running, got a string ("a b")'],
    ['a replica_metrics path', svc('groups:', '  - {replicas: 1, router: {}, commands: [a]}', '  - {name: w, replicas: 1..2, scaling: {metric: rps, target: 1, replica_metrics: {port: 9000, path: metrics, requests: r}}, commands: [b]}'), 'service.yml:5:101: groups[1].scaling.replica_metrics.path: expected a path starting with /, such as /metrics, got a string ("metrics")'],
    ['a hold on a group that does not scale from zero', svc('commands: [a]', 'replicas: 1..2', 'scaling: {metric: rps, target: 1, hold: 10m}'), 'service.yml:5:35: scaling.hold: `hold` is how long the gateways hold a request while a group scaled to zero wakes: this one starts with 1 (replicas: 0..2 to scale it to zero)'],
    ['a hold past 15 minutes', svc('commands: [a]', 'replicas: 0..2', 'scaling: {metric: rps, target: 1, hold: 1h}'), 'service.yml:5:41: scaling.hold: a hold is 1s to 15m (a replica has 15 minutes to get READY), got a string ("1h")'],
    ['replica_metrics without a port', svc('groups:', '  - {replicas: 1, router: {}, commands: [a]}', '  - {name: w, replicas: 1..2, scaling: {metric: rps, target: 1, replica_metrics: {requests: r}}, commands: [b]}'), 'service.yml:5:82: groups[1].scaling.replica_metrics.port: required field is missing'],
    ['a group without commands or image', svc('groups:', '  - {replicas: 1}'), 'service.yml:4:5: groups[0]: group "0" has no `commands`: give it `commands` or `image`, or set `image` on the service'],
    ['image on the service and a group', svc('image: a/b', 'groups:', '  - {replicas: 1, image: c/d}'), 'service.yml:5:26: groups[0].image: `image` is set both on the service and in group "0": set it in one place only'],
    ['two router groups', svc('groups:', '  - {replicas: 1, router: {}, commands: [a]}', '  - {replicas: 1, router: {type: dynamo}, commands: [b]}'), 'service.yml:5:19: groups[1].router: at most one group may have `router` (also groups[0])'],
    ['a router group with 2 replicas', svc('groups:', '  - {replicas: 2, router: {}, commands: [a]}'), 'service.yml:4:16: groups[0].replicas: the router group "0" must have replicas: 1 (dstack runs one router)'],
    ['a scaling router group', svc('groups:', '  - {replicas: 1..2, scaling: {metric: rps, target: 1}, router: {}, commands: [a]}'), 'service.yml:4:16: groups[0].replicas: the router group "0" must have replicas: 1 (dstack runs one router)'],
    ['a router type', svc('groups:', '  - {replicas: 1, router: {type: nginx}, commands: [a]}'), 'service.yml:4:34: groups[0].router.type: expected smg or dynamo, got a string ("nginx")'],
    ['duplicate group names', svc('groups:', '  - {name: "1", replicas: 1, commands: [a]}', '  - {replicas: 1, commands: [b]}'), 'service.yml:5:5: groups[1]: duplicate group name "1" (also groups[0]): names must be unique; a group without `name` is named by its index'],
    ['a group name', svc('groups:', '  - {name: Router, replicas: 1, commands: [a]}'), 'service.yml:4:12: groups[0].name: a group name must match ^[a-z0-9][a-z0-9-]{0,39}$ (lowercase letters, digits and -, at most 40 characters)'],
    ['`ports` in a group', svc('groups:', '  - {replicas: 1, commands: [a], ports: [80]}'), 'service.yml:4:34: groups[0].ports: unknown field `ports` in a replica group'],
    ['`env` in a group', svc('groups:', '  - {replicas: 1, commands: [a], env: [A=1]}'), 'service.yml:4:34: groups[0].env: unknown field `env` in a replica group'],
    ['a dstack group field Troupe lacks', svc('groups:', '  - {replicas: 1, commands: [a], spot_policy: auto}'), 'service.yml:4:34: groups[0].spot_policy: Troupe does not support the dstack field `spot_policy`: remove it'],
    ['the gateway (next)', svc('commands: [a]', 'gateway: false'), 'service.yml:4:1: gateway: `gateway` in the service is not supported yet: remove it'],
    ['the list form of replicas', svc('replicas: [{replicas: 1, commands: [a]}]'), "service.yml:3:11: replicas: a list under `replicas` is dstack's older spelling of `groups`: rename `replicas:` to `groups:`"],
    ['depends_on an unknown group', svc('groups:', '  - {replicas: 1, commands: [a], depends_on: [nope]}'), 'service.yml:4:47: groups[0].depends_on[0]: no group named "nope" (groups: 0)'],
    ['on_peers_change without depends_on', svc('groups:', '  - {replicas: 1, commands: [a], on_peers_change: x}'), 'service.yml:4:34: groups[0].on_peers_change: group "0" has no `depends_on`: on_peers_change runs when the groups it depends on change; add depends_on or remove it'],
    ['a quorum above the replicas at start', svc('groups:', '  - {replicas: 1..3, scaling: {metric: rps, target: 1}, commands: [a], ready: {min: 2}}'), 'service.yml:4:85: groups[0].ready.min: ready.min is 2 but group "0" starts with 1 replica (replicas: 1..3): its dependents would wait for replicas it does not start with; lower it or use a percentage'],
    [
      'depends_on a group that scales to zero (Troupe)',
      svc('groups:', '  - {name: a, replicas: 0..2, scaling: {metric: rps, target: 1}, commands: [a]}', '  - {replicas: 1, commands: [b], depends_on: [a]}'),
      'service.yml:5:47: groups[1].depends_on[0]: group "a" starts with 0 replicas (replicas: 0..2): "1" would wait until it scales up; depend on groups that start with at least 1 replica',
    ],
    ['startup_order with depends_on', svc('startup_order: any', 'groups:', '  - {name: a, replicas: 1, commands: [a]}', '  - {replicas: 1, commands: [b], depends_on: [a]}'), 'service.yml:3:1: startup_order: `startup_order` and `depends_on` (groups[1]) cannot be combined: depends_on already orders start-up; remove startup_order'],
  ])('%s', (_what, text, expected) => {
    expect(refusal(text)).toBe(expected);
  });
});

describe('address references: only replicas guaranteed at start (dstack: the group minimum)', () => {
  const twoGroups = (cmd: string, second = 'replicas: 2') => svc('groups:', `  - {replicas: 1, commands: ["${cmd}"]}`, `  - {${second}, commands: [b]${second.includes('..') ? ', scaling: {metric: rps, target: 1}' : ''}}`);

  it.each<[string, string, string]>([
    ['a replica past a fixed count', twoGroups('x ${{ groups[1].replicas[2].IP_ADDRESS }}'), 'service.yml:4:33: groups[0].commands[0]: reference groups[1].replicas[2].IP_ADDRESS is out of range: group 1 ("1") has 2 replica(s), 0..1'],
    [
      'a replica past the minimum of a range',
      twoGroups('x ${{ groups[1].replicas[1].IP_ADDRESS }}', 'replicas: 1..3'),
      'service.yml:4:33: groups[0].commands[0]: reference groups[1].replicas[1].IP_ADDRESS is out of range: group 1 ("1") starts with 1 replica(s) (replicas: 1..3), and only those have an address in commands: use 0..0, or read the live addresses from $TROUPE_PEERS_FILE',
    ],
    [
      'any replica of a group that scales to zero',
      twoGroups('x ${{ groups[1].replicas[0].IP_ADDRESS }}', 'replicas: 0..3'),
      'service.yml:4:33: groups[0].commands[0]: reference groups[1].replicas[0].IP_ADDRESS is out of range: group 1 ("1") scales to zero (replicas: 0..3), so no replica is guaranteed at start: read the live addresses from $TROUPE_PEERS_FILE',
    ],
    ['a group that does not exist', twoGroups('x ${{ groups[5].replicas[0].IP_ADDRESS }}'), 'service.yml:4:33: groups[0].commands[0]: reference groups[5].replicas[0].IP_ADDRESS is out of range: the service has 2 group(s), 0..1'],
    ['a task-style nodes reference', twoGroups('x ${{ groups[1].nodes[0].IP_ADDRESS }}'), 'service.yml:4:33: groups[0].commands[0]: Illegal reference name "groups[1].nodes[0].IP_ADDRESS": only ${{ groups[i].replicas[j].IP_ADDRESS }} can be used in commands'],
    [
      'a reference in top-level commands of a service without groups',
      svc('replicas: 2', 'commands: ["x ${{ groups[0].replicas[2].IP_ADDRESS }}"]'),
      'service.yml:4:15: commands[0]: reference groups[0].replicas[2].IP_ADDRESS is out of range: group 0 ("0") has 2 replica(s), 0..1',
    ],
  ])('%s', (_what, text, expected) => {
    expect(refusal(text)).toBe(expected);
  });
});

describe('the task planner and a service config', () => {
  it('says the file is a service and that services are checked, not run', () => {
    expect(() => loadPlan(svc('commands: [a]'), FILE, { environ: {} })).toThrow(
      'service.yml:1:7: type: this is a service config: `troupe plan` checks services, but Troupe does not run them yet; expected `type: task`',
    );
  });
});

describe('examples/services', () => {
  const dir = fileURLToPath(new URL('../../examples/services/', import.meta.url));
  // Values an example takes from the submitting shell (its header says how to set them); `troupe plan` warns of them.
  const fromShell: Record<string, string[]> = { 'pd-service-local.yml': ['STAND_IN_MODEL'], 'zero-local.yml': ['STAND_IN_MODEL'], 'pd-zero-local.yml': ['STAND_IN_MODEL'] };
  it.each(readdirSync(dir).filter((f) => f.endsWith('.yml')))('%s plans', (file) => {
    const missing: string[] = [];
    const onMissingEnv = (err: Error) => missing.push(/variable (\S+) is not set/.exec(err.message)?.[1] ?? err.message);
    const plan = loadServicePlan(readFileSync(`${dir}${file}`, 'utf8'), `examples/services/${file}`, { environ: {}, onMissingEnv });
    expect(plan.groups.length).toBeGreaterThan(0);
    expect(missing).toEqual(fromShell[file] ?? []);
  });
});
