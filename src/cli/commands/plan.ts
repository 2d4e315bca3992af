import { parseArgs } from 'node:util';
import { ConfigError } from '../../config/errors';
import { loadPlan, loadServicePlan, planToJson, serviceSource, type Plan } from '../../plan';
import { CliError, type Command } from '../command';
import { readConfigText } from '../config-text';
import { renderPlan } from '../render/plan-table';
import { renderServicePlan } from '../render/service-plan-table';
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
  [
    "Checks a task config and shows its plan: the groups, the global ranks of their jobs and each node's",
    'resources after defaults. A service config (`type: service`) shows its endpoint settings and replica',
    'groups. Starts nothing and needs no server.',
  ].join('\n'),
  [
    ['-f, --file FILE', 'the task or service config (dstack format, `type: task` or `type: service`)'],
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
  const loadOptions = {
    environ: process.env,
    ...(values.name !== undefined ? { runName: values.name } : {}),
    // Showing a plan needs no values; `troupe apply` refuses until they are set.
    onMissingEnv: (error: ConfigError) => process.stderr.write(`warning: ${error.message}\n`),
  };
  let out: string;
  try {
    if (serviceSource(text, file)) {
      const service = loadServicePlan(text, file, loadOptions);
      out = values.json ? JSON.stringify(service, null, 2) : renderServicePlan(service, styleFor(process.stdout)).join('\n');
    } else {
      const plan: Plan = loadPlan(text, file, loadOptions);
      out = values.json ? JSON.stringify(planToJson(plan), null, 2) : renderPlan(plan, styleFor(process.stdout), { jobs: true }).join('\n');
    }
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, 1);
    throw err;
  }
  process.stdout.write(`${out}\n`);
  return 0;
};
