/**
 * POSIX single-quoting: the only character that needs care inside '...' is the quote itself.
 * Safe for any string without NUL (which no argv or env value can hold anyway).
 */
export function shQuote(value: string): string {
  if (value.includes('\0')) throw new Error('cannot pass a NUL character to a shell');
  return `'${value.replaceAll("'", `'\\''`)}'`;
}
