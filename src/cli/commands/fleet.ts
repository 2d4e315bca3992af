import { parseArgs } from 'node:util';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { TroupeClient } from '../../client';
import { loadFleetConfig, type Plan } from '../../plan';
import { previewPlacement } from '../../fleet/placement-preview';
import { FleetClient, FleetError, FleetNotFoundError } from '../../fleet/fleet-client';
import { fleetSpecOf, ignoredFleetSettings } from '../../fleet/fleet-spec';
import { runWorkflowId } from '../../contract/ids';
import { stopRunSignal } from '../../contract/messages';
import { CliError, type Command } from '../command';
import { readConfigText } from '../config-text';
import { connectClient, connectionHelp, connectionOptions, connectionSettings, describeConnection } from '../connection';
import { cliErrorOf } from '../render/client-errors';
import { renderFleetApply, renderFleetHosts, renderFleetList, renderPlacement } from '../render/fleet-table';
import { assertCanAsk, confirm } from '../render/prompt';
import { paint, styleFor, type Style } from '../render/style';
import { parseOrUsage, renderUsage } from '../render/usage';

const options = {
  file: { type: 'string', short: 'f' },
  name: { type: 'string', short: 'n' },
  force: { type: 'boolean' },
  yes: { type: 'boolean', short: 'y' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  ...connectionOptions,
} as const;

const help = renderUsage(
  'troupe fleet apply -f fleet.yml [--name NAME] | list | show NAME | delete NAME [--force] [-y]',
  [
    'SSH fleets: existing hosts that runs get whole (`troupe apply --fleet NAME`, or `fleets: [NAME]`).',
    '  apply   connects to every host of the config (type: fleet, ssh_config), verifies its key and',
    '          detects CPUs, memory, free disk, GPUs and the internal address; creates the fleet or',
    '          updates it (every host is probed again). Host keys are checked against the known_hosts',
    '          files the workers read (TROUPE_KNOWN_HOSTS, colon-separated; default ~/.ssh/known_hosts)',
    '          and the keys verified before; a host nothing knows is PINNED at first contact and shown.',
    '  list    the fleets, with idle, busy and unreachable hosts',
    '  show    a fleet\'s hosts: what each has, its status and which run/job holds it',
    '  delete  removes the fleet; refused while runs hold hosts, unless --force (which stops those runs)',
  ].join('\n'),
  [
    ['-f, --file FILE', 'the fleet config (apply)'],
    ['-n, --name NAME', "fleet name, instead of the config's (apply)"],
    ['--force', 'delete even while runs hold hosts: those runs are stopped'],
    ['-y, --yes', 'delete without asking'],
    ['--json', 'the fleet state as JSON (list, show)'],
    ...connectionHelp,
  ],
);

async function withFleets<T>(values: Parameters<typeof connectionSettings>[0], body: (fleets: FleetClient, troupe: TroupeClient) => Promise<T>): Promise<T> {
  const troupe = await connectClient(connectionSettings(values));
  try {
    return await body(new FleetClient(troupe.temporal, { taskQueue: troupe.taskQueue }), troupe);
  } catch (err) {
    if (err instanceof FleetError) throw new CliError(err.message);
    throw cliErrorOf(err);
  } finally {
    await troupe.close();
  }
}

type Values = ReturnType<typeof parseArgs<{ args: string[]; options: typeof options }>>['values'];

async function apply(values: Values): Promise<number> {
  if (!values.file) throw new CliError(`fleet apply needs the fleet config: -f FILE\n\n${help}`, 2);
  const text = readConfigText(values.file);
  let spec;
  let notes: string[];
  try {
    const config = loadFleetConfig(text, values.file, { environ: process.env });
    spec = fleetSpecOf(config, values.file, values.name);
    notes = ignoredFleetSettings(config);
  } catch (err) {
    const mapped = cliErrorOf(err);
    throw mapped instanceof CliError ? mapped : new CliError(err instanceof Error ? err.message : String(err));
  }
  const style = styleFor(process.stdout);
  return await withFleets(values, async (fleets, troupe) => {
    await troupe.checkWorkers(`apply fleet ${spec.name}`);
    for (const note of notes) process.stderr.write(`${paint(styleFor(process.stderr), 'yellow', 'note:')} ${note}\n`);
    process.stderr.write(`Applying fleet ${spec.name}: connecting to ${spec.hosts.length} host(s)…\n`);
    const state = await fleets.apply(spec);
    process.stdout.write(`${renderFleetApply(state, style).join('\n')}\n`);
    const ready = state.hosts.filter((h) => h.status === 'ready').length;
    process.stderr.write(`\nFleet ${spec.name}: ${ready} of ${state.hosts.length} host(s) ready on ${describeConnection(connectionSettings(values))}.\n`);
    return ready > 0 ? 0 : 1;
  });
}

async function list(values: Values): Promise<number> {
  return await withFleets(values, async (fleets) => {
    const all = await fleets.list();
    if (values.json) process.stdout.write(`${JSON.stringify(all, null, 2)}\n`);
    else if (all.length === 0) process.stdout.write('No fleets. Create one with `troupe fleet apply -f fleet.yml`.\n');
    else process.stdout.write(`${renderFleetList(all, styleFor(process.stdout)).join('\n')}\n`);
    return 0;
  });
}

async function show(values: Values, name: string): Promise<number> {
  return await withFleets(values, async (fleets) => {
    const state = await fleets.state(name);
    if (!state) throw new FleetNotFoundError(name);
    if (values.json) {
      process.stdout.write(`${JSON.stringify(state, null, 2)}\n`);
      return 0;
    }
    const style = styleFor(process.stdout);
    process.stdout.write(`${paint(style, 'bold', `Fleet ${name}`)} (placement ${state.placement})\n${renderFleetHosts(state, style).join('\n')}\n`);
    return 0;
  });
}

async function remove(values: Values, name: string): Promise<number> {
  if (!values.yes) assertCanAsk('-y');
  return await withFleets(values, async (fleets, troupe) => {
    const state = await fleets.state(name);
    if (!state) throw new FleetNotFoundError(name);
    const runs = [...new Set(state.hosts.flatMap((h) => (h.holder ? [h.holder.run_name] : [])))];
    if (runs.length > 0 && !values.force) {
      throw new CliError(`fleet ${name} has hosts held by run(s) ${runs.join(', ')}: stop them first (troupe stop NAME), or pass --force to stop them`);
    }
    const question = runs.length > 0 ? `Stop run(s) ${runs.join(', ')} and delete fleet ${name}?` : `Delete fleet ${name}?`;
    if (!values.yes && !(await confirm(question))) {
      process.stderr.write('Not deleted.\n');
      return 0;
    }
    for (const run of runs) {
      try {
        await troupe.temporal.workflow.getHandle(runWorkflowId(run)).signal(stopRunSignal, { abort: false });
        process.stderr.write(`Stopping run ${run}…\n`);
      } catch (err) {
        if (!(err instanceof WorkflowNotFoundError)) throw err;
      }
    }
    await fleets.delete(name, { force: values.force === true });
    process.stderr.write(`Fleet ${name} deleted.\n`);
    return 0;
  });
}

export const command: Command = async (args) => {
  const { values, positionals } = parseOrUsage(() => parseArgs({ args, options, allowPositionals: true }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  const [action, name, ...extra] = positionals;
  if (extra.length > 0) throw new CliError(`unexpected arguments: ${extra.join(' ')}\n\n${help}`, 2);
  const needName = (): string => {
    if (!name) throw new CliError(`fleet ${action} needs the fleet's name\n\n${help}`, 2);
    return name;
  };
  switch (action) {
    case 'apply':
      return await apply(values);
    case 'list':
      return await list(values);
    case 'show':
      return await show(values, needName());
    case 'delete':
      return await remove(values, needName());
    default:
      throw new CliError(`${action === undefined ? 'fleet needs an action' : `unknown fleet action "${action}"`}\n\n${help}`, 2);
  }
};

/**
 * For `troupe apply` on the SSH backend: the plan's placement on its fleet, previewed from the
 * fleet's state with the fleet's own rule (no host is taken). Refuses a run without a fleet or
 * whose fleet does not exist.
 */
export async function fleetPlacementLines(troupe: TroupeClient, plan: Plan, style: Style): Promise<string[]> {
  const name = plan.fleets?.[0];
  if (!name) {
    throw new CliError('the ssh backend places jobs on a fleet and the run names none: pass --fleet NAME, or set `fleets: [NAME]` in the task', 2);
  }
  const state = await new FleetClient(troupe.temporal, { taskQueue: troupe.taskQueue }).state(name);
  if (!state) throw new CliError(new FleetNotFoundError(name).message);
  return renderPlacement(name, previewPlacement(plan, state), style);
}
