import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** bench/results/: where every bench writes its PNG and JSON (created on first use). */
export function resultsDir(): string {
  const dir = fileURLToPath(new URL('../results/', import.meta.url));
  mkdirSync(dir, { recursive: true });
  return dir;
}
