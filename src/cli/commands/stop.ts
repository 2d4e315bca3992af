import { parseArgs } from 'node:util';
import { isFinished } from '../../client';
import { CliError, runNameArgument, type Command } from '../command';
import { connectClient, connectionHelp, connectionOptions, connectionSettings } from '../connection';
import { onInterrupt } from '../interrupt';
import { cliErrorOf } from '../render/client-errors';
import { assertCanAsk, confirm } from '../render/prompt';
import { renderRunOutcome } from '../render/run-table';
import { closedOutsideNote } from '../render/closed-outside';
import { paintStatus, styleFor } from '../render/style';
import { formatDuration } from '../render/time-text';
import { parseOrUsage, renderUsage } from '../render/usage';

const options = {
  abort: { type: 'boolean', short: 'x' },
  yes: { type: 'boolean', short: 'y' },
  help: { type: 'boolean', short: 'h' },
  ...connectionOptions,
} as const;

const help = renderUsage(
  'troupe stop RUN [-x] [-y]',
  [
    'Stops a run: every job gets SIGTERM, then SIGKILL after the grace period; with -x, at once.',
    'Every node is released either way. Waits until the run has ended and prints how it ended.',
  ].join('\n'),
  [
    ['-x, --abort', 'abort: no grace period'],
    ['-y, --yes', 'do not ask to confirm'],
    ...connectionHelp,
  ],
);

export const command: Command = async (args) => {
  const { values, positionals } = parseOrUsage(() => parseArgs({ args, options, allowPositionals: true }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  const [runName, ...extra] = positionals;
  if (runName === undefined || extra.length > 0) throw new CliError(`stop needs exactly one run name\n\n${help}`, 2);
  runNameArgument(runName);
  if (!values.yes) assertCanAsk('-y');
  const style = styleFor(process.stderr);
  const settings = connectionSettings(values);
  const troupe = await connectClient(settings);
  const interrupt = onInterrupt();
  try {
    const handle = troupe.run(runName);
    const before = await handle.state();
    if (isFinished(before.status)) {
      process.stderr.write(`Run ${runName} has already ended: ${paintStatus(style, before.status)}.\n`);
      const closed = await handle.describe();
      const note = closedOutsideNote(closed.status.name, closed.closeTime ? formatDuration(Date.now() - closed.closeTime.getTime()) : null);
      if (note) process.stderr.write(`${note}\n`);
      return 0;
    }
    const verb = values.abort ? 'Abort' : 'Stop';
    if (!values.yes && !(await confirm(`${verb} the run ${runName} (${before.status})?`))) {
      process.stderr.write('Not stopped.\n');
      return 0;
    }
    const sent = values.abort ? await handle.abort() : await handle.stop();
    if (sent) process.stderr.write(`${values.abort ? 'Aborting' : 'Stopping'} run ${runName}…\n`);
    const ending = handle.wait();
    ending.catch(() => undefined);
    const final = await Promise.race([ending, interrupt.interrupted]);
    if (final === 'interrupted') {
      process.stderr.write(`\nRun ${runName} is still stopping; \`troupe ps -a\` shows when it has ended.\n`);
      return await interrupt.letGo();
    }
    process.stderr.write(`${renderRunOutcome(final, style).join('\n')}\n`);
    return 0;
  } catch (err) {
    throw cliErrorOf(err);
  } finally {
    interrupt.dispose();
    await troupe.close();
  }
};
