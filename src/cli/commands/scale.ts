import { parseArgs } from 'node:util';
import { GROUP_NAME } from '../../config/task-schema';
import { CliError, runNameArgument, type Command } from '../command';
import { connectClient, connectionHelp, connectionOptions, connectionSettings } from '../connection';
import { onInterrupt } from '../interrupt';
import { cliErrorOf } from '../render/client-errors';
import { describeScaleResult } from '../render/scale-result';
import { parseOrUsage, renderUsage } from '../render/usage';

const options = {
  help: { type: 'boolean', short: 'h' },
  ...connectionOptions,
} as const;

const help = renderUsage(
  'troupe scale RUN GROUP N',
  [
    'Resizes group GROUP of a running run to N nodes, within the bounds its `nodes: MIN..MAX` declares.',
    'New nodes take new global ranks after the existing ones; removed nodes are the highest ranks of the',
    'group. Waits until the new nodes run (READY with a probe) or the removed ones are stopped and',
    'released, then prints the group\'s size and the peers version the nodes see.',
  ].join('\n'),
  [...connectionHelp],
);

export const command: Command = async (args) => {
  const { values, positionals } = parseOrUsage(() => parseArgs({ args, options, allowPositionals: true }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  const [runName, group, count, ...extra] = positionals;
  if (runName === undefined || group === undefined || count === undefined || extra.length > 0) {
    throw new CliError(`scale needs a run name, a group name and a number of nodes\n\n${help}`, 2);
  }
  runNameArgument(runName);
  if (!GROUP_NAME.test(group)) throw new CliError(`${JSON.stringify(group)} is not a group name: ^[a-z0-9][a-z0-9-]{0,39}$, as the task's \`groups\` names them`, 2);
  if (!/^\d+$/.test(count) || !Number.isSafeInteger(Number(count)) || Number(count) < 1) {
    throw new CliError(`N is the group's new number of nodes, a whole number 1 or more; got "${count}"`, 2);
  }
  const nodes = Number(count);
  const settings = connectionSettings(values);
  const troupe = await connectClient(settings);
  const interrupt = onInterrupt();
  try {
    process.stderr.write(`Scaling group ${group} of run ${runName} to ${nodes} node${nodes === 1 ? '' : 's'}…\n`);
    const scaling = troupe.run(runName).scaleGroup(group, nodes);
    scaling.catch(() => undefined);
    const result = await Promise.race([scaling, interrupt.interrupted]);
    if (result === 'interrupted') {
      process.stderr.write(`\nThe run goes on resizing ${group}; \`troupe ps\` shows its nodes.\n`);
      return await interrupt.letGo();
    }
    process.stdout.write(`${describeScaleResult(result)}\n`);
    return 0;
  } catch (err) {
    throw cliErrorOf(err);
  } finally {
    interrupt.dispose();
    await troupe.close();
  }
};
