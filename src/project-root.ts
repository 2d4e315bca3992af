import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The checkout Troupe runs from: where `.troupe/` (keys) and `.venv/` (the Temporal CLI) live. */
export const projectRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
