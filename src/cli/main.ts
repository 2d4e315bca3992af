import { CliError, type Command } from './command';
import { escapeControlChars, guardStream } from './render/control-chars';

/**
 * `troupe <command> [options]`. Each command lives in its own module under commands/ and is
 * loaded only when called, so `troupe plan` never loads the Temporal SDK.
 */
const commands: Record<string, () => Promise<{ command: Command }>> = {
  plan: () => import('./commands/plan'),
  apply: () => import('./commands/apply'),
  ps: () => import('./commands/ps'),
  logs: () => import('./commands/logs'),
  metrics: () => import('./commands/metrics'),
  stop: () => import('./commands/stop'),
  scale: () => import('./commands/scale'),
  rollout: () => import('./commands/rollout'),
  worker: () => import('./commands/worker'),
  setup: () => import('./commands/setup'),
  fleet: () => import('./commands/fleet'),
  'codec-server': () => import('./commands/codec-server'),
  gateway: () => import('./commands/gateway'),
};

function usage(): string {
  return [
    'usage: troupe <command> [options]',
    '',
    'commands:',
    ...Object.keys(commands).map((name) => `  ${name}`),
    '',
    'Run `troupe <command> --help` for a command\'s options.',
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(`${usage()}\n`);
    return name === undefined ? 2 : 0;
  }
  const load = commands[name];
  if (!load) {
    process.stderr.write(`troupe: unknown command "${escapeControlChars(name)}"\n\n${usage()}\n`);
    return 2;
  }
  const { command } = await load();
  return await command(rest);
}

// One gate for every output path: control and bidi characters from any source come out escaped.
guardStream(process.stdout);
guardStream(process.stderr);
try {
  process.exitCode = await main(process.argv.slice(2));
} catch (thrown) {
  // Every command's refusals by the service read the same, whether or not the command mapped them;
  // loaded here, on the error path only, so `troupe plan` still never loads the Temporal SDK.
  const err = thrown instanceof CliError ? thrown : (await import('./render/client-errors')).cliErrorOf(thrown);
  if (err instanceof CliError) {
    process.stderr.write(`${escapeControlChars(err.message)}\n`);
    process.exitCode = err.exitCode;
  } else {
    // A refusal is one line (a bad secret key, a service that said no); the trace only on request.
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`troupe: ${escapeControlChars(message).replaceAll('\n', ' ')}\n`);
    if (process.env.TROUPE_DEBUG === '1' && err instanceof Error && err.stack) process.stderr.write(`${err.stack}\n`);
    process.exitCode = 1;
  }
}
