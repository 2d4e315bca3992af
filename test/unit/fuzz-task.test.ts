import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConfigError } from '../../src/config/errors';
import { loadPlan, type LoadPlanOptions } from '../../src/plan';
import {
  applyStructural,
  applyText,
  checkPlan,
  checkRefusal,
  FILE,
  fuzzParams,
  outcome,
  runNameArb,
  structuralMutationArb,
  taskArb,
  textMutationArb,
  toYaml,
  validTaskArb,
  watchdog,
  yamlStyleArb,
} from './fuzz-config-arbitraries';

/**
 * Generated and mutated task configs into the planner: every input ends in a plan that keeps the
 * plan's invariants or in a one-line ConfigError, within CALL_LIMIT_MS. A failure prints the
 * seed; FUZZ_SEED=<seed> replays it, FUZZ_SCALE=10 hunts longer.
 */

beforeAll(() => watchdog.start());
afterAll(() => watchdog.stop());

const environ = { HF_TOKEN: 'hf-fuzz', MODEL_ID: 'meta-llama/Llama-3.2-3B-Instruct', HOME: '/root' };

/** How `troupe plan` and `troupe apply` call the planner: with or without -n, warning or refusing on a missing KEY. */
const callArb = fc.record({
  runName: fc.option(fc.oneof(runNameArb, fc.constantFrom('Bad_Name', '', 'x')), { nil: undefined }),
  warnMissing: fc.boolean(),
});
type Call = { runName: string | undefined; warnMissing: boolean };

function plan(text: string, call: Call): void {
  const warnings: ConfigError[] = [];
  const opts: LoadPlanOptions = {
    environ,
    ...(call.runName !== undefined ? { runName: call.runName } : {}),
    ...(call.warnMissing ? { onMissingEnv: (e: ConfigError) => warnings.push(e) } : {}),
  };
  const result = outcome(text, () => loadPlan(text, FILE, opts));
  if (result.ok) checkPlan(result.value, call.runName, text);
  for (const warning of warnings) checkRefusal(warning, text);
}

describe('fuzz: task configs into loadPlan', () => {
  it('a task that follows every rule always plans, and the plan says what the task says', () => {
    fc.assert(
      fc.property(validTaskArb, yamlStyleArb, ({ config, expectedEnv, groups }, style) => {
        const text = toYaml(config, style);
        // The YAML library's own writer loses some whitespace-only strings in block styles: not ours to test.
        fc.pre(isDeepStrictEqual(parse(text, { version: '1.1' }), config));
        const result = outcome(text, () => loadPlan(text, FILE, { environ }));
        if (!result.ok) throw new Error(`valid task refused: ${result.error?.message ?? "(a known bug)"}\n${text}`);
        checkPlan(result.value, config.name as string, text);
        expect(result.value.env).toEqual(expectedEnv);
        expect(result.value.groups.map((g) => [g.name, g.nodes, g.commands])).toEqual(groups.map((g) => [g.name, g.nodes, g.commands]));
      }),
      fuzzParams(1_000),
    );
  });

  it('generated tasks: a plan or a one-line refusal', () => {
    fc.assert(
      fc.property(taskArb, yamlStyleArb, callArb, (config, style, call) => plan(toYaml(config, style), call)),
      fuzzParams(2_000),
    );
  });

  it('structurally mutated tasks (keys deleted, retyped, swapped, added): a plan or a one-line refusal', () => {
    fc.assert(
      fc.property(
        taskArb,
        fc.array(structuralMutationArb, { minLength: 1, maxLength: 4 }),
        yamlStyleArb,
        callArb,
        (config, mutations, style, call) => plan(toYaml(applyStructural(config, mutations), style), call),
      ),
      fuzzParams(2_500),
    );
  });

  it('textually mutated tasks (truncated, bytes flipped, YAML syntax inserted, lines moved): a plan or a one-line refusal', () => {
    fc.assert(
      fc.property(
        taskArb,
        yamlStyleArb,
        fc.array(textMutationArb, { minLength: 1, maxLength: 5 }),
        callArb,
        (config, style, mutations, call) => plan(applyText(toYaml(config, style), mutations), call),
      ),
      fuzzParams(3_500),
    );
  });

  it('arbitrary text: a refusal (or, rarely, a plan)', () => {
    const lineArb = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 40 }),
      fc.constantFrom('type: task', 'commands: [x]', 'groups:', '  - name: a', '    commands: [x]', 'nodes: 2', 'env:', '  - A=1', '&a', '*a', '<<: *a'),
    );
    fc.assert(
      fc.property(fc.array(lineArb, { maxLength: 8 }), callArb, (lines, call) => plan(lines.join('\n'), call)),
      fuzzParams(1_000),
    );
  });
});
