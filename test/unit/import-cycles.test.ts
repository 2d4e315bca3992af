import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { importCycles } from '../helpers/import-cycles';

/**
 * No module of Troupe imports itself through others: a circle makes the order in which modules
 * are evaluated matter, and means a reader must hold several files in mind to understand one.
 */
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

describe('import circles', () => {
  it('there are none in src/, workflows/ and activities/ (type imports count)', () => {
    expect(importCycles(root, ['src', 'workflows', 'activities'])).toEqual([]);
  });

  it('finds a circle, also one made of type imports only (the check itself)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'troupe-cycles-'));
    try {
      mkdirSync(join(dir, 'm'));
      writeFileSync(join(dir, 'm', 'a.ts'), "import { b } from './b';\nexport const a = b;\n");
      writeFileSync(join(dir, 'm', 'b.ts'), "import type { C } from './c';\nexport const b = 1 as unknown as C;\n");
      writeFileSync(join(dir, 'm', 'c.ts'), "export type { A as C } from './index';\n");
      writeFileSync(join(dir, 'm', 'index.ts'), "import { a } from './a';\nexport type A = typeof a;\n");
      writeFileSync(join(dir, 'm', 'apart.ts'), "import { a } from './a';\nexport const apart = a;\n");
      expect(importCycles(dir, ['m'])).toEqual(['m/a.ts -> m/b.ts -> m/c.ts -> m/index.ts -> m/a.ts']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
