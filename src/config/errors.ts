/**
 * Every refusal of a config: where it is (`file:line:col` of the offending YAML node), which field
 * (`groups[1].resources.gpu`) and what is wrong — one line, so a terminal or an editor can jump to it.
 */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';

  constructor(
    readonly file: string,
    /** 1-based. */
    readonly line: number,
    /** 1-based. */
    readonly col: number,
    /** The field path, e.g. `groups[1].resources.gpu`; `(document)` or `(yaml)` when no field applies. */
    readonly path: string,
    /** What is wrong, and what to do when that is not obvious. */
    readonly reason: string,
  ) {
    super(`${file}:${line}:${col}: ${oneLine(path)}: ${oneLine(reason)}`);
  }
}

/** One line, and not endless: a refusal never echoes a 10 MB value back. */
function oneLine(text: string): string {
  const line = text.replace(/\s*[\r\n]\s*/g, ' ').trim();
  return line.length > MAX_PART ? `${line.slice(0, MAX_PART - 1)}…` : line;
}

const MAX_PART = 400;
