/** A path into a config document: mapping keys and sequence indexes. */
export type FieldPath = readonly (string | number)[];

/** `["groups", 1, "resources", "gpu"]` → `groups[1].resources.gpu`; the empty path → `(document)`. */
export function formatFieldPath(path: FieldPath): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out === '' ? part : `.${part}`;
  }
  return out === '' ? '(document)' : out;
}
