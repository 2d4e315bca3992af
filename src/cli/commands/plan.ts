import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { ConfigError } from '../../config/errors';
import { loadPlan, planToJson, type Plan } from '../../plan';
import { CliError, type Command } from '../command';
import { formatResources } from '../render/plan-table';
import { styleFor, type Style } from '../render/style';
import { renderFields, renderTable } from '../render/table';
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
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new CliError(`cannot read ${file}: ${err instanceof Error ? err.message : String(err)}`, 2);
  }
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
  const out = values.json ? JSON.stringify(planToJson(plan), null, 2) : renderPlanView(plan, styleFor(process.stdout)).join('\n');
  process.stdout.write(`${out}\n`);
  return 0;
};

function roleOf(job: Plan['jobs'][number]): string {
  if (job.global_master) return 'global master';
  return job.group_master ? 'group master' : 'worker';
}

function ranksOf(plan: Plan, groupIndex: number): string {
  const ranks = plan.jobs.filter((j) => j.node_group_index === groupIndex).map((j) => j.job_num);
  const first = ranks[0];
  const last = ranks[ranks.length - 1];
  if (first === undefined || last === undefined) return '-';
  return first === last ? String(first) : `${first}-${last}`;
}

/** The run's settings, a row per group (ranks, resources, ports), then a row per job. */
export function renderPlanView(plan: Plan, style: Style): string[] {
  const retry = plan.retry ? `on ${plan.retry.on_events.join(', ')} for ${plan.retry.duration_s}s` : 'no';
  const fields: Array<[string, string]> = [
    ['Run', plan.run_name],
    ['Nodes', `${plan.nodes_num} in ${plan.groups.length} group${plan.groups.length === 1 ? '' : 's'}`],
    ['Image', plan.image ?? '- (commands run on the host)'],
    ['Startup order', plan.startup_order],
    ['Stop criteria', plan.stop_criteria],
    ['Retry', retry],
    ['Max duration', plan.max_duration_s === null ? 'off' : `${plan.max_duration_s}s`],
    ...(plan.fleets?.length ? [['Fleets', plan.fleets.join(', ')] as [string, string]] : []),
  ];
  const groupRows = plan.groups.map((g) => [
    String(g.index),
    g.name,
    String(g.nodes),
    ranksOf(plan, g.index),
    formatResources(g.resources),
    g.ports.map((p) => (p.local_port === p.container_port ? String(p.container_port) : `${p.local_port ?? '*'}:${p.container_port}`)).join(',') ||
      '-',
  ]);
  const jobRows = plan.jobs.map((j) => [String(j.job_num), j.job_name, j.node_group_name, String(j.node_group_job_index), roleOf(j)]);
  return [
    ...renderFields(fields, style),
    '',
    ...renderTable(['#', 'GROUP', 'NODES', 'RANKS', 'RESOURCES', 'PORTS'], groupRows, style, { alignRight: new Set([0, 2]) }),
    '',
    ...renderTable(['RANK', 'JOB', 'GROUP', 'NODE', 'ROLE'], jobRows, style, { alignRight: new Set([0, 3]) }),
  ];
}
