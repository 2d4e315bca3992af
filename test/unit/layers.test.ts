import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { relativeImports, tsFiles } from '../helpers/import-cycles';

/**
 * Layers point one way: config → plan → runner → backends → activities → workflows → client → CLI.
 * A lower layer never imports a higher one, and nothing below the CLI and the worker's composition
 * imports the embedded dev server (a library must not need a dev server to find its files).
 */
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

interface Rule {
  /** Modules under this folder… */
  from: string;
  /** …import nothing under these. */
  never: string[];
  /** …but for these modules. */
  except?: string[];
}

const ABOVE_BACKENDS = ['activities/', 'workflows/', 'src/client/', 'src/cli/', 'src/worker/', 'src/devserver/'];

const RULES: Rule[] = [
  // config and plan share the plan's schemas, and a plan checks its commands' references with the
  // runner's (pure) interpolation: one layer below the backends.
  { from: 'src/config/', never: ['src/backends/', ...ABOVE_BACKENDS] },
  { from: 'src/plan/', never: ['src/backends/', ...ABOVE_BACKENDS] },
  { from: 'src/runner/', never: ['src/backends/', ...ABOVE_BACKENDS] },
  // Backends are below the fleet (whose SSH backend, src/fleet/ssh-backend.ts, places jobs through it) and the contract.
  { from: 'src/backends/', never: ['src/fleet/', 'src/contract/', 'src/run-core/', ...ABOVE_BACKENDS] },
  { from: 'src/secrets/', never: ['src/devserver/', 'src/cli/', 'src/worker/'] },
  { from: 'src/codec/', never: ['src/devserver/', 'src/cli/', 'src/worker/'] },
  { from: 'activities/', never: ['src/client/', 'src/cli/', 'src/worker/', 'src/devserver/'] },
  // The contract (messages, ids, the run's state and inputs, their schemas): what workflows, activities
  // and clients all import; it imports none of them.
  { from: 'src/contract/', never: ['workflows/', 'activities/', 'src/client/', 'src/cli/', 'src/worker/', 'src/devserver/'] },
  // The run's core: plain decisions below the workflows; it sees the contract, never the workflows.
  { from: 'src/run-core/', never: ['workflows/', 'activities/', 'src/client/', 'src/cli/', 'src/worker/', 'src/devserver/'] },
  // Workflows see activities only through their types: their inputs (activities/types.ts) and, for
  // proxyActivities, TroupeActivities (activities/index.ts), derived from the implementation.
  { from: 'workflows/', never: ['activities/', 'src/client/', 'src/cli/', 'src/worker/', 'src/devserver/'], except: ['activities/types.ts', 'activities/index.ts'] },
];

/** Every import that breaks a rule, as `from.ts -> to.ts`. */
function layerViolations(base: string, dirs: string[], rules: Rule[]): string[] {
  const found: string[] = [];
  for (const file of dirs.flatMap((dir) => tsFiles(join(base, dir)))) {
    const from = relative(base, file);
    for (const target of relativeImports(file)) {
      const to = relative(base, target);
      const broken = rules.some((r) => from.startsWith(r.from) && r.never.some((n) => to.startsWith(n)) && !r.except?.includes(to));
      if (broken) found.push(`${from} -> ${to}`);
    }
  }
  return found.sort();
}

describe('layers', () => {
  it('no module imports a layer above its own', () => {
    expect(layerViolations(root, ['src', 'workflows', 'activities'], RULES)).toEqual([]);
  });

  it('below the activities nothing knows Temporal: the core decides, backends throw domain errors, the activity boundary maps them', () => {
    const temporal = ['src/run-core', 'src/backends', 'src/runner', 'src/plan', 'src/config']
      .flatMap((dir) => tsFiles(join(root, dir)))
      .filter((file) => /from '@temporalio\//.test(readFileSync(file, 'utf8')));
    expect(temporal.map((file) => relative(root, file))).toEqual([]);
  });

  it('finds an upward import, a type-only one too (the check itself)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'troupe-layers-'));
    try {
      for (const sub of ['src/runner', 'src/backends/ssh', 'src/devserver', 'src/run-core', 'workflows']) mkdirSync(join(dir, sub), { recursive: true });
      writeFileSync(join(dir, 'src', 'run-core', 'p.ts'), "import type { W } from '../../workflows/w';\nexport type P = W;\n");
      writeFileSync(join(dir, 'workflows', 'w.ts'), 'export type W = 1;\n');
      writeFileSync(join(dir, 'src', 'devserver', 'd.ts'), 'export const d = 1;\n');
      writeFileSync(join(dir, 'src', 'runner', 'r.ts'), "export const r = 1;\n");
      writeFileSync(join(dir, 'src', 'backends', 'ssh', 'b.ts'), "import type { W } from '../../../workflows/w';\nimport { r } from '../../runner/r';\nexport const b: W = r;\n");
      writeFileSync(join(dir, 'src', 'runner', 'bad.ts'), "export { d } from '../devserver/d';\n");
      expect(layerViolations(dir, ['src', 'workflows'], RULES)).toEqual([
        'src/backends/ssh/b.ts -> workflows/w.ts',
        'src/run-core/p.ts -> workflows/w.ts',
        'src/runner/bad.ts -> src/devserver/d.ts',
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
