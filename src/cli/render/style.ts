import type { JobStatus, RunStatus } from '../../contract/run-state';

/** Whether output gets ANSI colors: only on a terminal, never with NO_COLOR, always with FORCE_COLOR. */
export interface Style {
  color: boolean;
}

export const plain: Style = { color: false };

export function styleFor(stream: { isTTY?: boolean }, env: Record<string, string | undefined> = process.env): Style {
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return plain;
  const force = env.FORCE_COLOR;
  if (force !== undefined && force !== '') return { color: force !== '0' && force !== 'false' };
  return { color: stream.isTTY === true };
}

const codes = {
  bold: 1,
  dim: 2,
  red: 31,
  green: 32,
  yellow: 33,
  blue: 34,
  cyan: 36,
  gray: 90,
} as const;
export type Paint = keyof typeof codes;
/** The SGR codes paint() writes (and 0, which ends them): the only escape sequences the CLI's output gate lets through. */
export const PAINT_CODES: readonly number[] = Object.values(codes);

export function paint(style: Style, how: Paint, text: string): string {
  return style.color && text !== '' ? `\x1b[${codes[how]}m${text}\x1b[0m` : text;
}

// eslint-disable-next-line no-control-regex
const ansiPattern = /\x1b\[[0-9;]*[A-Za-z]/g;

export function stripAnsi(text: string): string {
  return text.replace(ansiPattern, '');
}

/** Width on screen: ANSI codes take no room. */
export function visibleLength(text: string): number {
  return [...stripAnsi(text)].length;
}

/** Green when it went well or goes on, yellow while on its way, red when it failed, gray when stopped. */
export function statusPaint(status: RunStatus | JobStatus): Paint {
  switch (status) {
    case 'DONE':
    case 'RUNNING':
    case 'READY':
      return 'green';
    case 'FAILED':
      return 'red';
    case 'TERMINATING':
    case 'TERMINATED':
    case 'ABORTED':
      return 'gray';
    default:
      return 'yellow';
  }
}

export function paintStatus(style: Style, status: RunStatus | JobStatus): string {
  return paint(style, statusPaint(status), status);
}
