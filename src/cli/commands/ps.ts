import { parseArgs } from 'node:util';
import { CliError, type Command } from '../command';
import { connectClient, connectionHelp, connectionOptions, connectionSettings, describeConnection } from '../connection';
import { cliErrorOf } from '../render/client-errors';
import { renderPsTable } from '../render/run-table';
import { styleFor } from '../render/style';
import { parseOrUsage, renderUsage } from '../render/usage';

const options = {
  all: { type: 'boolean', short: 'a' },
  json: { type: 'boolean' },
  last: { type: 'string', short: 'n' },
  help: { type: 'boolean', short: 'h' },
  ...connectionOptions,
} as const;

const help = renderUsage(
  'troupe ps [-a] [--json] [-n N]',
  'Lists runs, newest first, with a row per job: group, node, status, host, address and why it ended; a service with its deployment, endpoints, the rollout under way and replicas READY per group.',
  [
    ['-a, --all', 'finished runs too, not only the active ones'],
    ['--json', 'the runs as JSON (with each run\'s whole state)'],
    ['-n, --last N', 'at most N runs (default 100)'],
    ...connectionHelp,
  ],
);

export const command: Command = async (args) => {
  const { values } = parseOrUsage(() => parseArgs({ args, options }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  const limit = values.last === undefined ? 100 : Number(values.last);
  if (!Number.isInteger(limit) || limit < 1) throw new CliError(`-n wants a positive whole number, got "${values.last}"`, 2);
  const settings = connectionSettings(values);
  const troupe = await connectClient(settings);
  try {
    const runs = await troupe.list({ all: values.all === true, limit });
    if (values.json) {
      process.stdout.write(`${JSON.stringify(runs, null, 2)}\n`);
    } else if (runs.length === 0) {
      process.stdout.write(
        `No ${values.all ? '' : 'active '}runs on ${describeConnection(settings)}.${values.all ? '' : ' (`troupe ps -a` shows finished ones too.)'}\n`,
      );
    } else {
      process.stdout.write(`${renderPsTable(runs, styleFor(process.stdout), new Date(), process.stdout.columns).join('\n')}\n`);
    }
    return 0;
  } catch (err) {
    throw cliErrorOf(err);
  } finally {
    await troupe.close();
  }
};
