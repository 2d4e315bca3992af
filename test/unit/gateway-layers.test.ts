import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { relativeImports, tsFiles } from '../helpers/import-cycles';

/**
 * The gateway is the data plane: it never waits on Temporal for a request, so nothing it loads, even
 * for its types, comes from a Temporal package — its own modules nor any module of Troupe they reach.
 */
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

function packageImports(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    const spec =
      ts.isImportDeclaration(node) || ts.isExportDeclaration(node)
        ? node.moduleSpecifier
        : ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword
          ? node.arguments[0]
          : ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)
            ? node.argument.literal
            : undefined;
    if (spec && ts.isStringLiteral(spec) && !spec.text.startsWith('.')) found.push(spec.text);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** Every `file -> package` under `dir` and what it reaches through relative imports, for packages matching `banned`. */
function bannedImports(base: string, dir: string, banned: RegExp): string[] {
  const seen = new Set<string>();
  const found: string[] = [];
  const walk = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const spec of packageImports(file)) if (banned.test(spec)) found.push(`${relative(base, file)} -> ${spec}`);
    for (const next of relativeImports(file)) walk(next);
  };
  for (const file of tsFiles(join(base, dir))) walk(file);
  return found.sort();
}

describe('the gateway imports no Temporal package', () => {
  it('not in src/gateway/, nor in any module it reaches', () => {
    expect(bannedImports(root, 'src/gateway', /^@temporalio\//)).toEqual([]);
  });

  it('finds one through a type-only import two modules away (the check itself)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'troupe-gateway-layers-'));
    try {
      mkdirSync(join(dir, 'src', 'gateway'), { recursive: true });
      mkdirSync(join(dir, 'src', 'lib'), { recursive: true });
      writeFileSync(join(dir, 'src', 'gateway', 'g.ts'), "import { l } from '../lib/l';\nexport const g = l;\n");
      writeFileSync(join(dir, 'src', 'lib', 'l.ts'), "import type { Payload } from '@temporalio/common';\nexport const l: Payload | 1 = 1;\n");
      writeFileSync(join(dir, 'src', 'gateway', 'h.ts'), "export const h = async () => import('@temporalio/client');\n");
      expect(bannedImports(dir, 'src/gateway', /^@temporalio\//)).toEqual(['src/gateway/h.ts -> @temporalio/client', 'src/lib/l.ts -> @temporalio/common']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
