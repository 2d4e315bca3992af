import { visibleLength } from './style';

/** Past this many characters, a reason already printed is abbreviated the next time it comes. */
export const LONG_REASON = 60;

function abbreviated(reason: string): string {
  return `${reason.slice(0, LONG_REASON - 1)}… (in full above)`;
}

/**
 * A long reason (no capacity on 4 hosts, with each host's answer) printed once in full: where it
 * comes again (another job with the same failure, the run's own message), its first words and a
 * pointer above. `printed` remembers across calls, for a view that prints a run's changes as they come.
 */
export function onceInFull(entries: Array<{ line: string; reason: string }>, printed: Set<string> = new Set()): string[] {
  return entries.map(({ line, reason }) => {
    let text = line;
    if (reason.length > LONG_REASON && [...printed].some((earlier) => earlier.includes(reason))) {
      text = text.replace(reason, abbreviated(reason));
    } else {
      for (const earlier of printed) if (text.includes(earlier)) text = text.replace(earlier, abbreviated(earlier));
    }
    if (reason.length > LONG_REASON) printed.add(reason);
    return text;
  });
}

/** `text` cut to `width` characters on screen, ending in `…` when cut (plain text: no colours inside). */
export function fitWidth(text: string, width: number): string {
  if (width <= 0 || visibleLength(text) <= width) return text;
  return width === 1 ? '…' : `${text.slice(0, width - 1)}…`;
}
