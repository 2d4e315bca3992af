import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runtimeClosure } from '../helpers/runtime-imports';

/**
 * A worker evaluates the workflow modules again for every workflow it starts (a run makes one per
 * group), so what they import at load time is paid on every launch. zod's modules were most of it
 * (~7 ms a workflow): workflow code imports schemas' types only, and loads the schemas it checks
 * input with (message-schemas, fleet-schemas) with an eager `import()` when it needs them.
 */
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

describe('what the workflow bundle evaluates for each new workflow', () => {
  const closure = runtimeClosure(root, 'workflows/index.ts');

  it('imports no package but the Temporal workflow SDK', () => {
    const packages = [...closure].filter(([name]) => !name.startsWith('workflows/') && !name.startsWith('src/'));
    expect(packages.map(([name, chain]) => `${name} <- ${chain.join(' <- ')}`)).toEqual(['@temporalio/workflow <- workflows/index.ts <- workflows/run/run-workflow.ts']);
  });

  it('evaluates no schema module', () => {
    const schemas = [...closure].filter(([name]) => /schema/i.test(name));
    expect(schemas.map(([name, chain]) => `${name} <- ${chain.join(' <- ')}`)).toEqual([]);
  });

  it('sees through `import type` but not through value imports (the check itself)', () => {
    const clientSide = runtimeClosure(root, 'src/contract/message-schemas.ts');
    expect(clientSide.has('zod')).toBe(true);
    expect(clientSide.has('src/plan/plan-schema.ts')).toBe(true);
  });
});
