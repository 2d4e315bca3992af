/**
 * Sums of named metrics in a Prometheus text exposition (format 0.0.4, and OpenMetrics' text, which
 * reads the same for samples): every sample of a wanted name, whatever its labels, added up. A
 * replica's endpoint is a stranger: lines that do not parse are skipped, samples that are not finite
 * numbers (NaN, ±Inf) are not added, and a name with no sample is absent from the answer (not 0).
 */

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;

/** The end of a `{…}` label block that opens at `start`, quoted values (with `\"` escapes) skipped; -1: unterminated. */
function labelsEnd(line: string, start: number): number {
  let quoted = false;
  for (let i = start + 1; i < line.length; i++) {
    const c = line[i];
    if (quoted) {
      if (c === '\\') i++;
      else if (c === '"') quoted = false;
    } else if (c === '"') quoted = true;
    else if (c === '}') return i;
  }
  return -1;
}

/** A sample's value, or null for one that is not a finite number (NaN, ±Inf, garbage): it is not added. */
function sampleValue(text: string): number | null {
  const n = Number(text);
  return text !== '' && Number.isFinite(n) ? n : null;
}

export function sumMetrics(text: string, names: readonly string[]): Record<string, number> {
  const wanted = new Set(names);
  const sums: Record<string, number> = {};
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const name = NAME.exec(line)?.[0];
    if (!name || !wanted.has(name)) continue;
    let rest = line.slice(name.length);
    if (rest.startsWith('{')) {
      const end = labelsEnd(rest, 0);
      if (end < 0) continue;
      rest = rest.slice(end + 1);
    }
    if (!/^\s/.test(rest)) continue;
    const value = sampleValue(rest.trim().split(/\s+/)[0] ?? '');
    if (value === null) continue;
    sums[name] = (sums[name] ?? 0) + value;
  }
  return sums;
}
