import fc from 'fast-check';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { loadFleetConfig } from '../../src/plan';
import {
  applyStructural,
  applyText,
  checkFleet,
  fleetArb,
  FILE,
  fuzzParams,
  outcome,
  structuralMutationArb,
  textMutationArb,
  toYaml,
  watchdog,
  yamlStyleArb,
} from './fuzz-config-arbitraries';

/**
 * Generated and mutated fleet configs into loadFleetConfig: a resolved fleet that keeps its rules
 * or a one-line ConfigError, within CALL_LIMIT_MS. FUZZ_SEED replays a failure's seed.
 */

beforeAll(() => watchdog.start());
afterAll(() => watchdog.stop());

const environ = { HF_TOKEN: 'hf-fuzz', MODEL_ID: 'meta-llama/Llama-3.2-3B-Instruct' };

function load(text: string): void {
  const result = outcome(text, () => loadFleetConfig(text, FILE, { environ }));
  if (result.ok) checkFleet(result.value, text);
}

describe('fuzz: fleet configs into loadFleetConfig', () => {
  it('generated fleets: a fleet or a one-line refusal', () => {
    fc.assert(fc.property(fleetArb, yamlStyleArb, (config, style) => load(toYaml(config, style))), fuzzParams(1_000));
  });

  it('structurally mutated fleets: a fleet or a one-line refusal', () => {
    fc.assert(
      fc.property(fleetArb, fc.array(structuralMutationArb, { minLength: 1, maxLength: 4 }), yamlStyleArb, (config, mutations, style) =>
        load(toYaml(applyStructural(config, mutations), style)),
      ),
      fuzzParams(1_500),
    );
  });

  it('textually mutated fleets: a fleet or a one-line refusal', () => {
    fc.assert(
      fc.property(fleetArb, yamlStyleArb, fc.array(textMutationArb, { minLength: 1, maxLength: 5 }), (config, style, mutations) =>
        load(applyText(toYaml(config, style), mutations)),
      ),
      fuzzParams(2_000),
    );
  });
});
