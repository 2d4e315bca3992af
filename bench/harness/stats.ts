/** Order statistics for bench figures (nearest-rank percentiles). */

export function percentile(values: readonly number[], p: number): number {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] ?? Number.NaN;
}

export const median = (values: readonly number[]) => percentile(values, 50);

export function mean(values: readonly number[]): number {
  const finite = values.filter(Number.isFinite);
  return finite.length === 0 ? Number.NaN : finite.reduce((a, b) => a + b, 0) / finite.length;
}

/** 1234.5 → "1,235"; NaN → "n/a". */
export function fmt(value: number, digits = 0): string {
  if (!Number.isFinite(value)) return 'n/a';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export function bytes(value: number): string {
  if (!Number.isFinite(value)) return 'n/a';
  if (value >= 1024 * 1024) return `${fmt(value / 1024 / 1024, 2)} MiB`;
  if (value >= 1024) return `${fmt(value / 1024, 1)} KiB`;
  return `${fmt(value)} B`;
}
