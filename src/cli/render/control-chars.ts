/**
 * Text that came from input (a config, a flag, a host) may hold control characters: printed raw,
 * ESC and BEL would drive the user's terminal (set its title, move the cursor, hide what follows).
 * Every one but newline and tab is shown as an escape instead.
 */
// eslint-disable-next-line no-control-regex
const controlChars = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029]/gu;

export function escapeControlChars(text: string): string {
  return text.replace(controlChars, (c) => {
    const code = c.codePointAt(0) ?? 0;
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
