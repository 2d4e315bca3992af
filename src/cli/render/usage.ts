import { CliError } from '../command';

/** A command's help: usage line, what it does, and its options, aligned. */
export function renderUsage(usage: string, summary: string, options: Array<[string, string]>): string {
  const width = Math.max(...options.map(([flags]) => flags.length));
  return [
    `usage: ${usage}`,
    '',
    summary,
    '',
    'options:',
    ...options.map(([flags, text]) => `  ${flags.padEnd(width)}  ${text}`),
  ].join('\n');
}

/** Runs node:util's parseArgs; a bad flag becomes a usage error (exit 2) that shows the help. */
export function parseOrUsage<T>(parse: () => T, help: string): T {
  try {
    return parse();
  } catch (err) {
    throw new CliError(`${err instanceof Error ? err.message : String(err)}\n\n${help}`, 2);
  }
}
