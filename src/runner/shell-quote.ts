/**
 * Quoting for bash. A single-quoted word is taken literally by bash (no `$`, backtick, `\` or
 * newline is special inside it), so any string without NUL survives as one word.
 */

/** `value` as one literal bash word: `'it'\''s'` for `it's`. */
export function quoteShellWord(value: string): string {
  if (value.includes('\0')) throw new Error('a NUL byte cannot be passed through a shell');
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

const shellName = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** True when `name` can be a shell variable (so `export NAME=…` is valid). */
export function isShellName(name: string): boolean {
  return shellName.test(name);
}
