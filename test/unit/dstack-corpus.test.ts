import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError } from '../../src/config/errors';
import { loadPlan, loadServicePlan, planToJson, resourcesToJson, type ServicePlan } from '../../src/plan';

/**
 * Troupe's planner against the answers of the real dstack (test/vectors/dstack/expected.json for
 * tasks, services-expected.json for services, written by scripts/dstack-vectors.py, which CI never
 * runs). See test/vectors/dstack/README.md.
 */

const vectorsDir = fileURLToPath(new URL('../vectors/dstack/', import.meta.url));
const casesDir = `${vectorsDir}cases/`;

const RangeJson = z.object({ min: z.number().nullable(), max: z.number().nullable() }).strict();
const ResourcesJson = z
  .object({
    cpu: z.object({ arch: z.enum(['x86', 'arm']).nullable(), count: RangeJson }).strict(),
    memory: RangeJson,
    disk: RangeJson.nullable(),
    gpu: z
      .object({
        vendor: z.string().nullable(),
        name: z.array(z.string()).nullable(),
        count: RangeJson,
        memory: RangeJson.nullable(),
      })
      .strict(),
  })
  .strict();
const PortJson = z.object({ container_port: z.number(), local_port: z.number().nullable() }).strict();
const PlanJson = z
  .object({
    run_name: z.string(),
    nodes_num: z.number(),
    groups: z.array(
      z.object({ index: z.number(), name: z.string(), nodes: z.number(), resources: ResourcesJson }).strict(),
    ),
    jobs: z.array(
      z
        .object({
          job_num: z.number(),
          job_name: z.string(),
          node_group_index: z.number(),
          node_group_name: z.string(),
          node_group_job_index: z.number(),
          global_master: z.boolean(),
          group_master: z.boolean(),
          commands: z.array(z.string()),
          ports: z.array(PortJson),
        })
        .strict(),
    ),
  })
  .strict();
const RunSettings = z
  .object({
    env: z.record(z.string(), z.string()),
    startup_order: z.enum(['any', 'master-first', 'workers-first']),
    stop_criteria: z.enum(['all-done', 'master-done']),
    retry: z.object({ on_events: z.array(z.string()), duration_s: z.number() }).strict().nullable(),
    max_duration_s: z.number().nullable(),
    working_dir: z.string().nullable(),
  })
  .strict();
const Verdict = z.enum(['accepted', 'rejected', 'no-check']);
const Common = {
  file: z.string(),
  dstack: Verdict,
  dstack_stage: z.string().optional(),
  dstack_error: z.string().optional(),
  dstack_loc: z.string().optional(),
  why: z.string().optional(),
};
const ValidCase = z.object({ ...Common, valid: z.literal(true), plan: PlanJson, run: RunSettings }).strict();
const InvalidCase = z
  .object({ ...Common, valid: z.literal(false), plan: z.null(), field: z.array(z.string()), hint: z.string() })
  .strict();
const Corpus = z
  .object({
    generator: z.string(),
    dstack_version: z.string(),
    run_name_default: z.string(),
    environ: z.record(z.string(), z.string()),
    cases: z.array(z.discriminatedUnion('valid', [ValidCase, InvalidCase])),
  })
  .strict();

const corpus = Corpus.parse(JSON.parse(readFileSync(`${vectorsDir}expected.json`, 'utf8')));
const validCases = corpus.cases.filter((c): c is z.infer<typeof ValidCase> => c.valid);
const invalidCases = corpus.cases.filter((c): c is z.infer<typeof InvalidCase> => !c.valid);

/** The path the planner is given, and the one its messages start with. */
function casePath(file: string): string {
  return `test/vectors/dstack/cases/${file}`;
}

function load(file: string) {
  const text = readFileSync(`${casesDir}${file}`, 'utf8');
  // Every case writes its top-level keys at column 0; dstack would generate a random name.
  const hasName = /^name:/m.test(text);
  return loadPlan(text, casePath(file), {
    environ: { ...corpus.environ },
    ...(hasName ? {} : { runName: corpus.run_name_default }),
  });
}

/** Refused with one ConfigError line at `path:line:col`, naming one of the case's fields (if any). */
function expectRefused(load: () => unknown, path: string, c: { field: string[]; hint: string }): void {
  let thrown: unknown;
  try {
    load();
  } catch (error) {
    thrown = error;
  }
  expect(thrown, `expected a refusal: ${c.hint}`).toBeInstanceOf(ConfigError);
  const message = (thrown as ConfigError).message;
  expect(message).toMatch(/^.+:\d+:\d+: /);
  expect(message.startsWith(`${path}:`)).toBe(true);
  if (c.field.length > 0) {
    expect(
      c.field.some((field) => message.includes(field)),
      `message should name ${c.field.join(' or ')}: ${message}`,
    ).toBe(true);
  }
}

describe('dstack corpus', () => {
  it('holds at least 50 cases, 15 of them invalid, each with a recorded answer', () => {
    const files = readdirSync(casesDir).filter((f) => f.endsWith('.yml')).sort();
    expect(corpus.cases.map((c) => c.file)).toEqual(files);
    expect(files.length).toBeGreaterThanOrEqual(50);
    expect(invalidCases.length).toBeGreaterThanOrEqual(15);
  });

  describe.each(validCases)('$file (valid)', (c) => {
    it('plans the jobs, names and resource defaults dstack gives', () => {
      expect(planToJson(load(c.file))).toEqual(c.plan);
    });

    it('resolves env, start-up, stop, retry and duration settings as dstack does', () => {
      const plan = load(c.file);
      expect({
        env: plan.env,
        startup_order: plan.startup_order,
        stop_criteria: plan.stop_criteria,
        retry: plan.retry,
        max_duration_s: plan.max_duration_s,
        working_dir: plan.working_dir,
      }).toEqual(c.run);
    });
  });

  describe.each(invalidCases)('$file (invalid)', (c) => {
    it(`is refused at file:line:col naming ${c.field.join(' or ') || 'its position'}`, () => {
      expectRefused(() => load(c.file), casePath(c.file), c);
    });
  });
});

const ProbeJson = z
  .object({
    type: z.literal('http'),
    url: z.string(),
    method: z.string(),
    headers: z.array(z.object({ name: z.string(), value: z.string() }).strict()),
    body: z.string().nullable(),
    timeout_s: z.number(),
    interval_s: z.number(),
    ready_after: z.number(),
    until_ready: z.boolean(),
  })
  .strict();
const ServiceJson = z
  .object({
    run_name: z.string(),
    port: z.number(),
    auth: z.boolean(),
    strip_prefix: z.boolean(),
    model: z.object({ name: z.string(), prefix: z.string() }).strict().nullable(),
    rate_limits: z.array(
      z
        .object({
          prefix: z.string(),
          rps: z.number(),
          burst: z.number(),
          key: z.union([z.object({ type: z.literal('ip_address') }).strict(), z.object({ type: z.literal('header'), header: z.string() }).strict()]),
        })
        .strict(),
    ),
    router_group: z.number().nullable(),
    groups: z.array(
      z
        .object({
          index: z.number(),
          name: z.string(),
          replicas: RangeJson,
          scaling: z
            .object({ metric: z.literal('rps'), target: z.number(), window_s: z.number(), scale_up_delay_s: z.number(), scale_down_delay_s: z.number() })
            .strict()
            .nullable(),
          router: z.enum(['smg', 'dynamo']).nullable(),
          commands: z.array(z.string()),
          resources: ResourcesJson,
          probes: z.array(ProbeJson),
        })
        .strict(),
    ),
  })
  .strict();
const ValidService = z.object({ ...Common, valid: z.literal(true), service: ServiceJson }).strict();
const InvalidService = z
  .object({ ...Common, valid: z.literal(false), service: z.null(), field: z.array(z.string()), hint: z.string() })
  .strict();
const ServiceCorpus = Corpus.extend({ cases: z.array(z.discriminatedUnion('valid', [ValidService, InvalidService])) });

const services = ServiceCorpus.parse(JSON.parse(readFileSync(`${vectorsDir}services-expected.json`, 'utf8')));
const servicesDir = `${vectorsDir}services/`;

/** The part of a service plan dstack also derives: endpoint settings, groups, resources, probes. */
function serviceToJson(plan: ServicePlan) {
  return {
    run_name: plan.run_name,
    port: plan.port,
    auth: plan.auth,
    strip_prefix: plan.strip_prefix,
    model: plan.model,
    rate_limits: plan.rate_limits,
    router_group: plan.router_group,
    groups: plan.groups.map((g) => ({
      index: g.index,
      name: g.name,
      replicas: g.replicas,
      scaling: g.scaling,
      router: g.router,
      commands: g.commands,
      resources: resourcesToJson(g.resources),
      probes: g.probes,
    })),
  };
}

function loadService(file: string): ServicePlan {
  const text = readFileSync(`${servicesDir}${file}`, 'utf8');
  const hasName = /^name:/m.test(text);
  return loadServicePlan(text, `test/vectors/dstack/services/${file}`, {
    environ: { ...services.environ },
    ...(hasName ? {} : { runName: services.run_name_default }),
  });
}

describe('dstack corpus: services (dstack 0.22.5)', () => {
  it('holds every service case with a recorded answer, valid and invalid ones', () => {
    const files = readdirSync(servicesDir).filter((f) => f.endsWith('.yml')).sort();
    expect(services.cases.map((c) => c.file)).toEqual(files);
    expect(services.dstack_version).toBe('0.22.5');
    expect(services.cases.filter((c) => c.valid).length).toBeGreaterThanOrEqual(10);
    expect(services.cases.filter((c) => !c.valid).length).toBeGreaterThanOrEqual(25);
  });

  describe.each(services.cases.filter((c): c is z.infer<typeof ValidService> => c.valid))('$file (valid)', (c) => {
    it('plans the groups, replicas, router, probes and endpoint settings dstack derives', () => {
      expect(serviceToJson(loadService(c.file))).toEqual(c.service);
    });
  });

  describe.each(services.cases.filter((c): c is z.infer<typeof InvalidService> => !c.valid))('$file (invalid)', (c) => {
    it(`is refused at file:line:col naming ${c.field.join(' or ') || 'its position'}`, () => {
      expectRefused(() => loadService(c.file), `test/vectors/dstack/services/${c.file}`, c);
    });
  });
});
