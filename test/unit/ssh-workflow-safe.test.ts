import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runtimeClosure } from '../helpers/runtime-imports';

/**
 * Workflow code (FleetWorkflow, through src/contract/fleet-schemas.ts) loads SshTargetSchema and
 * HostFactsSchema: the modules they live in, and everything those import, must stay free of Node
 * built-ins and ssh2.
 */
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

describe('SSH modules imported by workflow code', () => {
  it.each(['src/backends/ssh/target.ts', 'src/backends/ssh/detect.ts'])('%s imports no Node built-in or ssh2', (entry) => {
    const offending = [...runtimeClosure(root, entry)]
      .filter(([name]) => name.startsWith('node:') || name === 'ssh2' || /^(fs|net|crypto|child_process|os|path)$/.test(name))
      .map(([name, chain]) => `${chain.at(-1) ?? entry}: ${name}`);
    expect(offending).toEqual([]);
  });
});
