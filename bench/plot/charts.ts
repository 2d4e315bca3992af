import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { Resvg } from '@resvg/resvg-js';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';

/**
 * The charts the benches draw: stacked horizontal bars and x/y line charts, one under the other
 * in one PNG. Each is a Vega-Lite spec; Vega renders it to SVG in Node (no browser, no canvas)
 * and resvg turns the SVG into a PNG with the machine's fonts.
 */

/** A Vega-Lite view (a unit or layered spec without $schema), as the builders below make them. */
export type Chart = Record<string, unknown>;

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

const ALERT = '#c81e1e';
const titleOf = (title: string, subtitle?: string) => ({ text: title, ...(subtitle ? { subtitle } : {}), anchor: 'start' });
const legendBelow = { orient: 'bottom', direction: 'horizontal', columns: 4, title: null, labelLimit: 400 };

export function stackedBarChart(o: StackedBarOptions): Chart {
  const bars = o.rows.flatMap((row, r) =>
    row.segments.map((value, s) => ({ row: r, label: row.label, segment: o.legend[s] ?? `#${s}`, order: s, value: Math.max(0, value) })),
  );
  const notes = o.rows.map((row, r) => {
    const total = row.segments.reduce((a, b) => a + Math.max(0, b), 0);
    return { row: r, label: row.label, total, note: row.note ?? String(+total.toPrecision(4)) };
  });
  // Rows by position (two rows may share a label), labelled by their text.
  const labels = JSON.stringify(o.rows.map((row) => row.label));
  const y = { field: 'row', type: 'ordinal', title: null, axis: { labelLimit: 500, labelExpr: `${labels}[datum.value]` } };
  const layers: Chart[] = [
    {
      data: { values: bars },
      mark: { type: 'bar', height: { band: 0.7 } },
      encoding: {
        y,
        x: { field: 'value', type: 'quantitative', stack: 'zero', title: o.unit },
        color: { field: 'segment', type: 'nominal', scale: { domain: o.legend, scheme: 'category10' }, legend: legendBelow },
        order: { field: 'order' },
      },
    },
    { data: { values: notes }, mark: { type: 'text', align: 'left', dx: 6 }, encoding: { y, x: { field: 'total', type: 'quantitative' }, text: { field: 'note' } } },
  ];
  if (o.references?.length) {
    const refs = { values: o.references };
    layers.push({ data: refs, mark: { type: 'rule', color: ALERT, strokeDash: [6, 4], strokeWidth: 2 }, encoding: { x: { field: 'value', type: 'quantitative' } } });
    layers.push({ data: refs, mark: { type: 'text', color: ALERT, align: 'left', baseline: 'top', dx: 4, y: 0 }, encoding: { x: { field: 'value', type: 'quantitative' }, text: { field: 'label' } } });
  }
  return { title: titleOf(o.title, o.subtitle), width: (o.width ?? 1000) - 300, height: { step: 34 }, layer: layers };
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

export function lineChart(o: LineChartOptions): Chart {
  const values = o.series.flatMap((s, i) =>
    s.points.filter(([a, b]) => Number.isFinite(a) && Number.isFinite(b) && (!o.logY || b > 0) && (!o.logX || a > 0)).map(([x, yv]) => ({ series: s.name, order: i, x, y: yv })),
  );
  const xTicks = o.xTicks ?? (o.logX ? [...new Set(values.map((v) => v.x))].sort((a, b) => a - b) : undefined);
  const layers: Chart[] = [
    {
      data: { values },
      mark: { type: 'line', point: { size: 40 }, strokeWidth: 2 },
      encoding: {
        x: { field: 'x', type: 'quantitative', title: o.xLabel, scale: o.logX ? { type: 'log', nice: false } : { zero: true }, ...(xTicks ? { axis: { values: xTicks } } : {}) },
        y: { field: 'y', type: 'quantitative', title: o.yLabel, scale: o.logY ? { type: 'log' } : { zero: true } },
        color: { field: 'series', type: 'nominal', scale: { domain: o.series.map((s) => s.name), scheme: 'category10' }, legend: legendBelow },
        order: { field: 'x' },
      },
    },
  ];
  if (o.references?.length) {
    const refs = { values: o.references };
    layers.push({ data: refs, mark: { type: 'rule', color: ALERT, strokeDash: [6, 4], strokeWidth: 2 }, encoding: { y: { field: 'value', type: 'quantitative' } } });
    layers.push({ data: refs, mark: { type: 'text', color: ALERT, align: 'right', baseline: 'bottom', dy: -3, x: 'width' }, encoding: { y: { field: 'value', type: 'quantitative' }, text: { field: 'label' } } });
  }
  return { title: titleOf(o.title, o.subtitle), width: (o.width ?? 1000) - 160, height: (o.height ?? 460) - 160, layer: layers };
}

/** Charts one under the other, in one image (each keeps its own scales and legend). */
export function stackVertically(charts: Chart[]): Chart {
  return { vconcat: charts, spacing: 40, resolve: { scale: { color: 'independent' }, legend: { color: 'independent' } } };
}

/** Renders the chart (Vega-Lite → Vega → SVG → PNG at twice the size, on white) into `path`. */
export async function writePng(path: string, chart: Chart): Promise<void> {
  const spec = {
    background: 'white',
    padding: 20,
    config: { font: 'DejaVu Sans', title: { fontSize: 18, subtitleFontSize: 13, subtitleColor: '#555' }, axis: { labelFontSize: 12, titleFontSize: 13 }, legend: { labelFontSize: 12 } },
    ...chart,
  } as TopLevelSpec;
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  const png = new Resvg(svg, { fitTo: { mode: 'zoom', value: 1.5 }, font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans' } }).render().asPng();
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, png);
}
