import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import ts from 'typescript';

/**
 * The modules a file pulls in when it is evaluated: its imports and re-exports that carry a value,
 * followed through relative paths. `import type`, imports whose every name is a type, and dynamic
 * `import()` pull nothing in at load time and are left out.
 */
export function runtimeImports(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
  const specs: string[] = [];
  for (const statement of source.statements) {
    if (ts.isImportDeclaration(statement)) {
      const clause = statement.importClause;
      const carriesValue =
        !clause ||
        (!clause.isTypeOnly &&
          (clause.name !== undefined ||
            (clause.namedBindings !== undefined &&
              (ts.isNamespaceImport(clause.namedBindings) || clause.namedBindings.elements.some((e) => !e.isTypeOnly)))));
      if (carriesValue && ts.isStringLiteral(statement.moduleSpecifier)) specs.push(statement.moduleSpecifier.text);
    } else if (ts.isExportDeclaration(statement) && statement.moduleSpecifier && ts.isStringLiteral(statement.moduleSpecifier)) {
      const clause = statement.exportClause;
      const carriesValue = !statement.isTypeOnly && (!clause || !ts.isNamedExports(clause) || clause.elements.some((e) => !e.isTypeOnly));
      if (carriesValue) specs.push(statement.moduleSpecifier.text);
    }
  }
  return specs;
}

export function resolveRelative(from: string, spec: string): string {
  const base = join(dirname(from), spec);
  for (const candidate of [base, `${base}.ts`, join(base, 'index.ts')]) {
    if (candidate.endsWith('.ts') && existsSync(candidate)) return candidate;
  }
  throw new Error(`${from}: cannot resolve ${spec}`);
}

/** Every module evaluated with `entry` (relative ones as paths under `root`, packages by name), with the chain that reaches it. */
export function runtimeClosure(root: string, entry: string): Map<string, string[]> {
  const chains = new Map<string, string[]>();
  const visit = (file: string, chain: string[]): void => {
    const name = relative(root, file);
    if (chains.has(name)) return;
    chains.set(name, chain);
    for (const spec of runtimeImports(file)) {
      if (spec.startsWith('.')) visit(resolveRelative(file, spec), [...chain, name]);
      else if (!chains.has(spec)) chains.set(spec, [...chain, name]);
    }
  };
  visit(join(root, entry), []);
  return chains;
}
