import { writeFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { Raster, type Rgb } from './raster';

/** The charts the benches draw: stacked horizontal bars and x/y line charts, stacked into one PNG. */

export const PALETTE: readonly Rgb[] = [
  [31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189],
  [140, 86, 75], [227, 119, 194], [127, 127, 127], [188, 189, 34], [23, 190, 207],
];
const INK: Rgb = [30, 30, 30];
const GRID: Rgb = [225, 225, 225];
const MUTED: Rgb = [110, 110, 110];
const ALERT: Rgb = [200, 30, 30];

export function colour(i: number): Rgb {
  return PALETTE[i % PALETTE.length] ?? INK;
}

/** 1234 → "1.2k", 0.25 → "0.25": short tick labels. */
export function formatTick(v: number): string {
  const a = Math.abs(v);
  if (a >= 1e9) return `${+(v / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (a >= 1e4) return `${+(v / 1e3).toFixed(0)}k`;
  if (a >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  if (a >= 10 || a === 0) return `${+v.toFixed(0)}`;
  return `${+v.toFixed(2)}`;
}

/** About `count` round tick values covering [0, max]. */
function linearTicks(max: number, count = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  const ticks: number[] = [];
  for (let t = 0; t <= max + step * 0.999; t += step) ticks.push(+t.toPrecision(12));
  return ticks;
}

function logTicks(min: number, max: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++) ticks.push(10 ** e);
  return ticks;
}

export interface ReferenceLine {
  label: string;
  value: number;
}

export interface StackedBarRow {
  label: string;
  /** One value per legend entry. */
  segments: number[];
  /** Printed right of the bar (default: the total). */
  note?: string;
}

export interface StackedBarOptions {
  title: string;
  subtitle?: string;
  unit: string;
  legend: string[];
  rows: StackedBarRow[];
  references?: ReferenceLine[];
  width?: number;
}

export function stackedBarChart(o: StackedBarOptions): Raster {
  const width = o.width ?? 1000;
  const labelWidth = Math.max(...o.rows.map((r) => Raster.textWidth(r.label, 2)), 60) + 20;
  const barH = 26;
  const top = 84;
  const plotH = o.rows.length * (barH + 14) + 10;
  const height = top + plotH + 50 + legendRows(o.legend, width) * 22 + 10;
  const r = new Raster(width, height);
  header(r, o.title, o.subtitle);
  const left = labelWidth;
  const right = width - 130;
  const maxTotal = Math.max(
    ...o.rows.map((row) => row.segments.reduce((a, b) => a + Math.max(0, b), 0)),
    ...(o.references ?? []).map((ref) => ref.value),
    1,
  );
  const ticks = linearTicks(maxTotal);
  const maxTick = ticks[ticks.length - 1] ?? maxTotal;
  const x = (v: number) => left + ((right - left) * v) / maxTick;
  for (const t of ticks) {
    r.line(x(t), top, x(t), top + plotH, GRID);
    r.text(x(t), top + plotH + 6, formatTick(t), MUTED, 1, 'center');
  }
  r.text((left + right) / 2, top + plotH + 20, o.unit, INK, 2, 'center');
  o.rows.forEach((row, i) => {
    const y = top + 10 + i * (barH + 14);
    r.text(left - 10, y + barH / 2 - 7, row.label, INK, 2, 'right');
    let acc = 0;
    row.segments.forEach((v, s) => {
      if (v <= 0) return;
      r.fillRect(x(acc), y, x(acc + v) - x(acc), barH, colour(s));
      acc += v;
    });
    r.text(x(acc) + 6, y + barH / 2 - 7, row.note ?? formatTick(acc), INK, 2);
  });
  for (const ref of o.references ?? []) {
    r.line(x(ref.value), top - 4, x(ref.value), top + plotH, ALERT, 2, 6);
    r.text(x(ref.value) + 4, top - 10, ref.label, ALERT, 1);
  }
  r.line(left, top, left, top + plotH, INK);
  legend(r, o.legend.map((name, i) => ({ name, colour: colour(i) })), LEGEND_X, top + plotH + 46);
  return r;
}

export interface Series {
  name: string;
  points: Array<[number, number]>;
}

export interface LineChartOptions {
  title: string;
  subtitle?: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  logX?: boolean;
  logY?: boolean;
  /** Tick values for x (default: every x in the data when logX, else round values). */
  xTicks?: number[];
  references?: ReferenceLine[];
  width?: number;
  height?: number;
}

export function lineChart(o: LineChartOptions): Raster {
  const width = o.width ?? 1000;
  const rowsOfLegend = legendRows(o.series.map((s) => s.name), width);
  const height = o.height ?? 460 + rowsOfLegend * 22;
  const r = new Raster(width, height);
  header(r, o.title, o.subtitle);
  const left = 100;
  const right = width - 30;
  const top = 70;
  const bottom = height - 70 - rowsOfLegend * 22;
  const points = o.series.flatMap((s) => s.points).filter(([px, py]) => Number.isFinite(px) && Number.isFinite(py));
  const xs = points.map(([px]) => px);
  const ys = [...points.map(([, py]) => py), ...(o.references ?? []).map((ref) => ref.value)];
  const xMin = o.logX ? Math.min(...xs) : 0;
  const xMax = Math.max(...xs, 1);
  const yMinPositive = Math.min(...ys.filter((v) => v > 0), 1);
  const yMax = Math.max(...ys, 1);
  const yTicks = o.logY ? logTicks(yMinPositive, yMax) : linearTicks(yMax);
  const yLo = o.logY ? (yTicks[0] ?? 1) : 0;
  const yHi = yTicks[yTicks.length - 1] ?? yMax;
  const xTicks = o.xTicks ?? (o.logX ? [...new Set(xs)].sort((a, b) => a - b) : linearTicks(xMax));
  const xHi = o.logX ? xMax : (xTicks[xTicks.length - 1] ?? xMax);
  const scale = (v: number, lo: number, hi: number, log: boolean) =>
    log ? (Math.log(v) - Math.log(lo)) / (Math.log(hi) - Math.log(lo) || 1) : (v - lo) / (hi - lo || 1);
  const px = (v: number) => left + (right - left) * (o.logX && xMin === xHi ? 0.5 : scale(v, xMin, xHi, o.logX === true));
  const py = (v: number) => bottom - (bottom - top) * scale(Math.max(v, o.logY ? yLo : v), yLo, yHi, o.logY === true);
  for (const t of yTicks) {
    r.line(left, py(t), right, py(t), GRID);
    r.text(left - 8, py(t) - 3, formatTick(t), MUTED, 1, 'right');
  }
  for (const t of xTicks) {
    r.line(px(t), top, px(t), bottom, GRID);
    r.text(px(t), bottom + 8, formatTick(t), MUTED, 1, 'center');
  }
  r.line(left, top, left, bottom, INK);
  r.line(left, bottom, right, bottom, INK);
  r.text((left + right) / 2, bottom + 24, o.xLabel, INK, 2, 'center');
  r.verticalText(16, (top + bottom) / 2, o.yLabel, INK, 2);
  for (const ref of o.references ?? []) {
    r.line(left, py(ref.value), right, py(ref.value), ALERT, 2, 6);
    r.text(right - 4, py(ref.value) - 12, ref.label, ALERT, 1, 'right');
  }
  o.series.forEach((s, i) => {
    const pts = s.points.filter(([a, b]) => Number.isFinite(a) && Number.isFinite(b));
    for (let k = 1; k < pts.length; k++) {
      const [ax, ay] = pts[k - 1] ?? [0, 0];
      const [bx, by] = pts[k] ?? [0, 0];
      r.line(px(ax), py(ay), px(bx), py(by), colour(i), 2);
    }
    for (const [a, b] of pts) r.marker(px(a), py(b), 7, colour(i));
  });
  legend(r, o.series.map((s, i) => ({ name: s.name, colour: colour(i) })), LEGEND_X, height - 24 - rowsOfLegend * 22 + 10);
  return r;
}

function header(r: Raster, title: string, subtitle?: string): void {
  r.text(20, 16, title, INK, 3);
  if (subtitle) r.text(20, 46, subtitle, MUTED, 2);
}

const LEGEND_X = 20;

function legendColumns(names: string[], width: number): { columns: number; colWidth: number } {
  const colWidth = Math.max(...names.map((n) => Raster.textWidth(n, 2)), 40) + 44;
  return { columns: Math.max(1, Math.floor((width - 2 * LEGEND_X) / colWidth)), colWidth };
}

function legendRows(names: string[], width: number): number {
  return Math.ceil(names.length / legendColumns(names, width).columns);
}

function legend(r: Raster, entries: Array<{ name: string; colour: Rgb }>, x0: number, y0: number): void {
  const { columns, colWidth } = legendColumns(entries.map((e) => e.name), r.width);
  entries.forEach((e, i) => {
    const x = x0 + (i % columns) * colWidth;
    const y = y0 + Math.floor(i / columns) * 22;
    r.fillRect(x, y, 14, 14, e.colour);
    r.text(x + 20, y, e.name, INK, 2);
  });
}

/** Panels one under the other, in one image. */
export function stackVertically(panels: Raster[]): Raster {
  const width = Math.max(...panels.map((p) => p.width));
  const height = panels.reduce((h, p) => h + p.height, 0);
  const out = new Raster(width, height);
  let y0 = 0;
  for (const p of panels) {
    for (let y = 0; y < p.height; y++) {
      const src = p.pixels.subarray(y * p.width * 4, (y + 1) * p.width * 4);
      out.pixels.set(src, ((y0 + y) * width) * 4);
    }
    y0 += p.height;
  }
  return out;
}

export function writePng(path: string, raster: Raster): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, raster.toPng());
}
