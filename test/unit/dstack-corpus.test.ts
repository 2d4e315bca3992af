import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError } from '../../src/config/errors';
import { loadPlan, planToJson } from '../../src/plan';

/**
 * Troupe's planner against the answers of the real dstack (test/vectors/dstack/expected.json,
 * written by scripts/dstack-vectors.py, which CI never runs). See test/vectors/dstack/README.md.
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
      let thrown: unknown;
      try {
        load(c.file);
      } catch (error) {
        thrown = error;
      }
      expect(thrown, `expected a refusal: ${c.hint}`).toBeInstanceOf(ConfigError);
      const message = (thrown as ConfigError).message;
      expect(message).toMatch(/^.+:\d+:\d+: /);
      expect(message.startsWith(`${casePath(c.file)}:`)).toBe(true);
      if (c.field.length > 0) {
        expect(
          c.field.some((field) => message.includes(field)),
          `message should name ${c.field.join(' or ')}: ${message}`,
        ).toBe(true);
      }
    });
  });
});
