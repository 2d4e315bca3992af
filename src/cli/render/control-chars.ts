import { PAINT_CODES } from './style';

/**
 * Text that came from input (a config, a flag, a host, a run's state written by any Temporal
 * client) may hold control characters: printed raw, ESC and BEL drive the user's terminal (set
 * its title, move the cursor, hide what follows), and bidi controls (U+202A–U+202E, U+2066–U+2069)
 * reorder what the user reads. Every one but newline and tab is shown as an escape instead:
 * `\xNN` below U+0020 (JSON never holds those raw), `\uNNNN` above, so JSON output stays JSON.
 */
// eslint-disable-next-line no-control-regex
const unsafeChars = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/gu;
// eslint-disable-next-line no-control-regex
const anyUnsafe = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/u;

export function escapeControlChars(text: string): string {
  return text.replace(unsafeChars, (c) => {
    const code = c.codePointAt(0) ?? 0;
    return code < 0x20 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

export function hasControlChars(text: string): boolean {
  return anyUnsafe.test(text);
}

// The color sequences paint() writes, and nothing else: split out, kept, the rest escaped.
// eslint-disable-next-line no-control-regex
const ownSequence = new RegExp(`(\\x1b\\[(?:${[0, ...PAINT_CODES].join('|')})m)`);

/** What the CLI writes: escapeControlChars(), except the colors the CLI paints itself. */
export function escapeOutput(text: string): string {
  return text
    .split(ownSequence)
    .map((part, i) => (i % 2 === 1 ? part : escapeControlChars(part)))
    .join('');
}

type Write = (chunk: never, ...rest: never[]) => unknown;
interface Writable {
  write: Write;
}
const rawWrites = new WeakMap<object, (chunk: unknown, ...rest: unknown[]) => unknown>();

/**
 * Every string written to the stream from now on goes through escapeOutput(): one gate for every
 * output path (plans, tables, refusals, errors), whatever renderer wrote it.
 */
export function guardStream(stream: Writable): void {
  if (rawWrites.has(stream)) return;
  const raw = stream.write.bind(stream) as (chunk: unknown, ...rest: unknown[]) => unknown;
  rawWrites.set(stream, raw);
  (stream as { write: (chunk: unknown, ...rest: unknown[]) => unknown }).write = (chunk, ...rest) =>
    raw(typeof chunk === 'string' ? escapeOutput(chunk) : chunk, ...rest);
}

/** Writes past the gate: a job's own log (`troupe logs`, what `apply` follows), the live view's redraw sequence. */
export function writeRaw(stream: { write(text: string): unknown }, text: string): void {
  const raw = rawWrites.get(stream);
  if (raw) raw(text);
  else stream.write(text);
}
