import { parseArgs } from 'node:util';
import { ConfigError } from '../../config/errors';
import { loadPlan, planToJson, type Plan } from '../../plan';
import { CliError, type Command } from '../command';
import { readConfigText } from '../config-text';
import { renderPlan } from '../render/plan-table';
import { styleFor } from '../render/style';
import { parseOrUsage, renderUsage } from '../render/usage';

const options = {
  file: { type: 'string', short: 'f' },
  json: { type: 'boolean' },
  name: { type: 'string', short: 'n' },
  help: { type: 'boolean', short: 'h' },
} as const;

const help = renderUsage(
  'troupe plan -f task.yml [--json] [-n NAME]',
  'Checks a task config and shows its plan: the groups, the global ranks of their jobs and each node\'s\nresources after defaults. Starts nothing and needs no server.',
  [
    ['-f, --file FILE', 'the task config (dstack format, `type: task`)'],
    ['--json', 'the plan as JSON'],
    ['-n, --name NAME', 'the run name (default: the config\'s `name`, else a generated one)'],
    ['-h, --help', 'this help'],
  ],
);

export const command: Command = async (args) => {
  const { values } = parseOrUsage(() => parseArgs({ args, options }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  const file = values.file;
  if (file === undefined) throw new CliError(`troupe plan needs a task config: -f FILE\n\n${help}`, 2);
  const text = readConfigText(file);
  let plan: Plan;
  try {
    plan = loadPlan(text, file, {
      environ: process.env,
      ...(values.name !== undefined ? { runName: values.name } : {}),
      // Showing a plan needs no values; `troupe apply` refuses until they are set.
      onMissingEnv: (error) => process.stderr.write(`warning: ${error.message}\n`),
    });
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, 1);
    throw err;
  }
  const out = values.json ? JSON.stringify(planToJson(plan), null, 2) : renderPlan(plan, styleFor(process.stdout), { jobs: true }).join('\n');
  process.stdout.write(`${out}\n`);
  return 0;
};
