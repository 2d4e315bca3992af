import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * Workflow code (the fleet's messages) imports SshTargetSchema and HostFactsSchema: the modules
 * they live in, and everything those import, must stay free of Node built-ins and ssh2.
 */
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

function runtimeImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  // `import type` is erased at compile time and cannot pull anything into a bundle.
  return [...text.matchAll(/^import\s+(?!type\s)[^;]*?from\s+'([^']+)'/gms)].map((m) => m[1] ?? '');
}

function closure(entry: string): Map<string, string[]> {
  const seen = new Map<string, string[]>();
  const visit = (file: string): void => {
    if (seen.has(file)) return;
    const imports = runtimeImports(file);
    seen.set(file, imports);
    for (const spec of imports) if (spec.startsWith('.')) visit(`${join(dirname(file), spec)}.ts`);
  };
  visit(join(root, entry));
  return seen;
}

describe('SSH modules imported by workflow code', () => {
  it.each(['src/backends/ssh/target.ts', 'src/backends/ssh/detect.ts'])('%s imports no Node built-in or ssh2', (entry) => {
    const offending = [...closure(entry)].flatMap(([file, imports]) =>
      imports.filter((s) => s.startsWith('node:') || s === 'ssh2' || /^(fs|net|crypto|child_process|os|path)$/.test(s)).map((s) => `${file}: ${s}`),
    );
    expect(offending).toEqual([]);
  });
});
