import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { resolveRelative } from './runtime-imports';

/** Every relative module `file` imports or re-exports, types too (a circle of types is still a circle to a reader). */
export function relativeImports(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
  const specs: string[] = [];
  for (const statement of source.statements) {
    const spec = ts.isImportDeclaration(statement) || ts.isExportDeclaration(statement) ? statement.moduleSpecifier : undefined;
    if (spec && ts.isStringLiteral(spec) && spec.text.startsWith('.')) specs.push(resolveRelative(file, spec.text));
  }
  return specs;
}

export function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return tsFiles(path);
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : [];
  });
}

/** The import circles among the modules under `dirs` (paths relative to `root`), each as `a -> b -> a`. */
export function importCycles(root: string, dirs: string[]): string[] {
  const files = dirs.flatMap((dir) => tsFiles(join(root, dir)));
  const edges = new Map(files.map((file) => [file, relativeImports(file)]));
  const cycles = new Set<string>();
  const done = new Set<string>();
  const visit = (file: string, path: string[]): void => {
    const at = path.indexOf(file);
    if (at >= 0) {
      // One name per circle, whichever module it was entered from.
      const circle = path.slice(at).map((f) => relative(root, f));
      const first = circle.indexOf([...circle].sort()[0] as string);
      const turned = [...circle.slice(first), ...circle.slice(0, first)];
      cycles.add([...turned, turned[0]].join(' -> '));
      return;
    }
    if (done.has(file)) return;
    for (const next of edges.get(file) ?? relativeImports(file)) visit(next, [...path, file]);
    done.add(file);
  };
  for (const file of files) visit(file, []);
  return [...cycles].sort();
}
