import { fitWidth } from './reason-text';
import { paint, stripAnsi, visibleLength, type Style } from './style';

export interface TableOptions {
  /** Columns aligned to the right (numbers). */
  alignRight?: ReadonlySet<number>;
  /** Indent of every line. Default one space, like dstack's tables. */
  indent?: string;
  /** The terminal's width: the last column (a reason) is cut to fit it, the rest is kept whole. */
  width?: number;
}

/**
 * Rows under a header, columns two spaces apart, padded by what shows on screen (colors take no
 * room). The last column is not padded, so no line ends in spaces.
 */
export function renderTable(headers: string[], rows: string[][], style: Style, options: TableOptions = {}): string[] {
  const indent = options.indent ?? ' ';
  const widths = headers.map((header, col) =>
    Math.max(visibleLength(header), ...rows.map((row) => visibleLength(row[col] ?? ''))),
  );
  const line = (cells: string[]): string => {
    const padded = cells.map((cell, col) => {
      const width = widths[col] ?? 0;
      const pad = ' '.repeat(Math.max(0, width - visibleLength(cell)));
      if (options.alignRight?.has(col)) return pad + cell;
      return col === cells.length - 1 ? cell : cell + pad;
    });
    const last = padded.pop() ?? '';
    const head = indent + padded.join('  ') + (padded.length > 0 ? '  ' : '');
    const room = options.width ? Math.max(1, options.width - visibleLength(head)) : 0;
    const fitted = room > 0 && visibleLength(last) > room ? fitWidth(stripAnsi(last), room) : last;
    return (head + fitted).trimEnd();
  };
  return [line(headers.map((h) => paint(style, 'bold', h))), ...rows.map(line)];
}

/** `key  value` lines with the keys aligned. */
export function renderFields(fields: Array<[string, string]>, style: Style, indent = ' '): string[] {
  const width = Math.max(0, ...fields.map(([key]) => key.length));
  return fields.map(([key, value]) => `${indent}${paint(style, 'bold', key.padEnd(width))}  ${value}`.trimEnd());
}
