import { parseArgs } from 'node:util';
import type { RunHandle, RunState } from '../../client';
import { isFinished } from '../../client';
import { backendNameProblem, defaultBackendFor, LOCAL_BACKEND, SSH_BACKEND } from '../../backends/backend-names';
import { fleetNameSchema } from '../../config/references';
import { isolationNotice } from '../../backends/local/isolation-mode';
import { randomBytes } from 'node:crypto';
import { loadPlan, loadServicePlan, serviceRunPlan, ServiceRunError, serviceSource, type Plan, type ServicePlan } from '../../plan';
import { tokenHash } from '../../gateway/token-auth';
import { renderServicePlan } from '../render/service-plan-table';
import { serviceEndpointLines } from '../render/service-lines';
import { CliError, type Command } from '../command';
import { readConfigText } from '../config-text';
import { connectClient, connectionHelp, connectionOptions, connectionSettings, describeConnection, workflowUrl } from '../connection';
import { onInterrupt } from '../interrupt';
import { cliErrorOf } from '../render/client-errors';
import { describeStateChanges, LiveView } from '../render/live-view';
import { LogLines } from '../render/log-lines';
import { renderPlan } from '../render/plan-table';
import { fleetPlacementLines } from './fleet';
import { assertCanAsk, confirm } from '../render/prompt';
import { nodeName, renderJobsTable, renderRunOutcome } from '../render/run-table';
import { paint, styleFor, type Style } from '../render/style';
import { parseOrUsage, renderUsage } from '../render/usage';
import { writeRaw } from '../render/control-chars';
import { startTracing } from '../../tracing/tracing';

const options = {
  file: { type: 'string', short: 'f' },
  yes: { type: 'boolean', short: 'y' },
  detach: { type: 'boolean', short: 'd' },
  backend: { type: 'string' },
  name: { type: 'string', short: 'n' },
  fleet: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  ...connectionOptions,
} as const;

const help = renderUsage(
  'troupe apply -f task.yml [-y] [-d] [--backend local] [--name NAME] [--fleet NAME]',
  [
    'Shows the plan of a task, asks to confirm, submits the run, shows each job as it starts, then',
    "follows job 0's log until the run ends. Ctrl-C detaches; the run goes on.",
    'A service (`type: service`) runs the same way; with `auth` (the default) its token is made here and',
    'printed once: the gateways and the run keep only its hash.',
    'Exit code: 0 when the run is DONE, 1 when it FAILED or was TERMINATED (or could not start), 2 on bad usage.',
  ].join('\n'),
  [
    ['-f, --file FILE', 'the config: a task (type: task) or a service (type: service)'],
    ['-y, --yes', 'submit without asking'],
    ['-d, --detach', 'return once the run is submitted'],
    ['--backend NAME', 'backend of the workers that provisions the nodes (default ssh with a fleet, else local)'],
    ['-n, --name NAME', "run name, instead of the config's name"],
    ['--fleet NAME', 'the SSH fleet the run gets its hosts from (or `fleets:` in the task)'],
    ...connectionHelp,
  ],
);

export const command: Command = async (args) => {
  const { values } = parseOrUsage(() => parseArgs({ args, options }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  if (!values.file) throw new CliError(`apply needs a config: -f FILE\n\n${help}`, 2);
  const text = readConfigText(values.file);
  const backendProblem = values.backend === undefined ? null : backendNameProblem(values.backend);
  if (backendProblem) throw new CliError(`--backend: ${backendProblem}`, 2);
  if (values.fleet !== undefined) {
    const fleet = fleetNameSchema.safeParse(values.fleet);
    if (!fleet.success) throw new CliError(`--fleet: ${fleet.error.issues[0]?.message ?? 'not a fleet name'}`, 2);
  }
  const settings = connectionSettings(values);
  if (!values.yes) assertCanAsk('-y');
  const style = styleFor(process.stderr);
  const { plan, service, token } = readPlan(text, values.file, values.name, values.fleet);

  const troupe = await connectClient(settings);
  try {
    const running = service ? await runningService(troupe.run(plan.run_name)) : null;
    if (running) {
      // A deployment changes what runs, never where: the backend (and the fleet, which the run refuses) stay.
      if (values.backend !== undefined && values.backend !== running.state.backend) {
        throw new CliError(`--backend ${values.backend}: service ${plan.run_name} runs on backend ${running.state.backend}, and a deployment keeps it; to move the service, troupe stop it and apply again`, 1);
      }
      return await deploy(running, plan, service, token, values.yes === true, style);
    }
    const backend = values.backend ?? defaultBackendFor(plan);
    await troupe.checkWorkers(`start run ${plan.run_name}`, backend);
    process.stderr.write(`${(service ? renderServicePlan(service, style) : renderPlan(plan, style, { backend })).join('\n')}\n\n`);
    if (backend === SSH_BACKEND) process.stderr.write(`${(await fleetPlacementLines(troupe, plan, style)).join('\n')}\n\n`);
    // The local fleet's worker runs on this machine, usually as the same user as this command.
    const notice = backend === LOCAL_BACKEND ? isolationNotice('Warning: the local fleet (when its worker runs as this user)') : null;
    if (notice) process.stderr.write(`${paint(style, 'yellow', notice)}\n\n`);
    if (!values.yes && !(await confirm(`Submit the run ${plan.run_name}?`))) {
      process.stderr.write('Not submitted.\n');
      return 0;
    }
    // With OTEL_EXPORTER_OTLP_ENDPOINT set, the submission is the root span of the run's trace.
    const tracing = startTracing('troupe-cli');
    const handle = await troupe.submit({ plan, backend, checkWorkers: false }).finally(() => tracing?.shutdown());
    const url = workflowUrl(settings, handle.workflowId);
    process.stderr.write(
      `Submitted run ${paint(style, 'bold', plan.run_name)} to ${describeConnection(settings)}.\n` +
        (url ? `Web UI: ${url}\n` : '') +
        (token ? `The service's token, shown once (calls send it as Authorization: Bearer $TOKEN):\n  export TOKEN=${token}\n` : ''),
    );
    if (values.detach) {
      if (service) process.stderr.write(await endpointsOnceKnown(handle, style));
      process.stderr.write(reattachHelp(plan.run_name));
      return 0;
    }
    return await attach(handle, style);
  } catch (err) {
    throw cliErrorOf(err);
  } finally {
    await troupe.close();
  }
};

/** The run of that name when it is a service that runs: `troupe apply` then deploys to it. */
async function runningService(handle: RunHandle): Promise<{ handle: RunHandle; state: RunState } | null> {
  const described = await handle.describe().catch(() => null);
  if (described?.status.name !== 'RUNNING') return null;
  const state = await handle.state();
  return state.service ? { handle, state } : null;
}

/**
 * `troupe apply` of a service that runs: its next deployment, as an Update the run checks before it
 * accepts it (what may change), answered once rolled. Its token stays; one is printed only when
 * the service had none.
 */
async function deploy(
  running: { handle: RunHandle; state: RunState },
  plan: Plan,
  service: ServicePlan | null,
  token: string | null,
  yes: boolean,
  style: Style,
): Promise<number> {
  const { handle, state } = running;
  const number = (state.service?.deployment ?? 0) + 1;
  if (service) process.stderr.write(`${renderServicePlan(service, style).join('\n')}\n\n`);
  if (!yes && !(await confirm(`Deploy it to the running service ${plan.run_name} (deployment ${number})?`))) {
    process.stderr.write('Not deployed.\n');
    return 0;
  }
  process.stderr.write(`Deploying to ${paint(style, 'bold', plan.run_name)} (deployment ${number}): ${howItRolls(plan)}…\n`);
  const result = await handle.applyService(plan);
  const rolled = result.rolled.length > 0 ? `rolled ${result.rolled.join(', ')}` : 'nothing to roll';
  process.stderr.write(
    `Deployment ${result.deployment} of ${plan.run_name} is done: ${rolled}; replicas ${result.groups.map((g) => `${g.name} ${g.replicas}`).join(', ')}.\n` +
      (token && state.service?.auth === false ? `The service's token, shown once (calls send it as Authorization: Bearer $TOKEN):\n  export TOKEN=${token}\n` : ''),
  );
  return 0;
}

interface ReadPlan {
  plan: Plan;
  /** A service's own plan (what `troupe plan` shows), or null for a task. */
  service: ServicePlan | null;
  /** A service's token, made here (null: a task, or `auth: false`). */
  token: string | null;
}

function readPlan(text: string, file: string, name: string | undefined, fleet: string | undefined): ReadPlan {
  try {
    const opts = { environ: process.env, ...(name !== undefined ? { runName: name } : {}) };
    const withFleet = (plan: Plan): Plan => (fleet ? { ...plan, fleets: [fleet] } : plan);
    if (!serviceSource(text, file)) return { plan: withFleet(loadPlan(text, file, opts)), service: null, token: null };
    const service = loadServicePlan(text, file, opts);
    const token = service.auth ? randomBytes(24).toString('base64url') : null;
    return { plan: withFleet(serviceRunPlan(service, token === null ? null : [tokenHash(token)])), service, token };
  } catch (err) {
    if (err instanceof ServiceRunError) throw new CliError(`${file}: ${err.message}`, 1);
    throw cliErrorOf(err);
  }
}

/** How long `troupe apply -d` of a service waits for its first routing table to be on the gateways. */
const ENDPOINTS_WAIT_MS = 30_000;

/** A detached service's endpoints, once its first table is on the gateways (or why not yet). */
async function endpointsOnceKnown(handle: RunHandle, style: Style): Promise<string> {
  const signal = AbortSignal.timeout(ENDPOINTS_WAIT_MS);
  let last: RunState | null = null;
  try {
    for await (const state of handle.watch({ signal })) {
      last = state;
      if ((state.service?.endpoints.length ?? 0) > 0 || isFinished(state.status)) break;
    }
  } catch {
    // Past the wait: said below.
  }
  const lines = last ? serviceEndpointLines(last, style) : [];
  if (lines.length > 0) return `${lines.join('\n')}\n`;
  const why = last?.message ? `: ${last.message}` : '';
  return `${paint(style, 'yellow', `Not on a gateway yet${why}`)} (\`troupe ps --json\` shows its endpoints once it is)\n`;
}

function reattachHelp(runName: string): string {
  const hints: Array<[string, string]> = [
    [`troupe logs ${runName} -f`, "follow job 0's log"],
    ['troupe ps', "every job's status and address"],
    [`troupe stop ${runName}`, 'stop it (-x aborts)'],
  ];
  const width = Math.max(...hints.map(([cmd]) => cmd.length));
  return hints.map(([cmd, what]) => `  ${cmd.padEnd(width)}  ${what}\n`).join('');
}

/** Job 0 has started (or will not): time to show its log. */
function masterStarted(state: RunState): boolean {
  const master = state.jobs[0];
  return master === undefined || master.running_at !== null || master.finished_at !== null;
}

/**
 * The live view until job 0 starts, then job 0's log (stdout) with job changes as lines (stderr),
 * until the run ends. Returns the exit code; Ctrl-C lets go of the run without stopping it.
 */
async function attach(handle: RunHandle, style: Style): Promise<number> {
  const interrupt = onInterrupt();
  const { signal } = interrupt;
  let unavailableNoted = false;
  /** Long reasons printed in full so far: the live lines and the closing summary print each once. */
  const printed = new Set<string>();
  const view = new LiveView(process.stderr, style, undefined, printed);
  const note = (line: string) => (view.closed ? process.stderr.write(`${line}\n`) : view.note(line));
  const onUnavailable = (err: Error) => {
    if (unavailableNoted) return;
    unavailableNoted = true;
    note(paint(style, 'yellow', `${err.message} Still trying…`));
  };
  const answered = () => {
    if (!unavailableNoted) return;
    unavailableNoted = false;
    note('The run answers again.');
  };

  const follow = async (): Promise<RunState> => {
    let last: RunState | null = null;
    for await (const state of handle.watch({ signal, onUnavailable })) {
      answered();
      view.update(state);
      last = state;
      if (isFinished(state.status) || masterStarted(state)) break;
    }
    view.close();
    if (signal.aborted || last === null) return last ?? (await handle.state());
    const master = last.jobs[0];
    if (master) {
      process.stderr.write(`${paint(style, 'dim', `── log of job 0 (${nodeName(master)}) ──`)}\n`);
    }
    const lines = new LogLines((text) => writeRaw(process.stdout, text));
    const changes = (async () => {
      let prev: RunState | null = last;
      for await (const state of handle.watch({ signal, onUnavailable })) {
        answered();
        const notes = describeStateChanges(prev, state, style, printed);
        if (notes.length > 0) process.stderr.write(`${notes.join('\n')}\n`);
        prev = state;
      }
      return prev;
    })();
    // After a detach its failure matters to no one.
    changes.catch(() => undefined);
    try {
      for await (const chunk of handle.streamLogs({ jobs: [0], follow: true, signal, onUnavailable })) lines.push(chunk.job_num, chunk.data);
    } catch (err) {
      if (signal.aborted) throw err;
      process.stderr.write(
        `${paint(style, 'yellow', `cannot follow the log: ${err instanceof Error ? err.message : String(err)}`)}; waiting for the run to end\n`,
      );
    } finally {
      lines.flush();
    }
    return (await changes) ?? last;
  };

  const following = follow();
  following.catch(() => undefined);
  try {
    const outcome = await Promise.race([following, interrupt.interrupted]);
    if (outcome === 'interrupted') {
      process.stderr.write(`\nDetached from run ${handle.name}; it goes on.\n${reattachHelp(handle.name)}`);
      return await interrupt.letGo();
    }
    const final = isFinished(outcome.status) ? outcome : await handle.wait();
    process.stderr.write(`\n${renderJobsTable(final, style, process.stderr.columns).join('\n')}\n${renderRunOutcome(final, style, printed).join('\n')}\n`);
    return final.status === 'DONE' ? 0 : 1;
  } finally {
    interrupt.dispose();
  }
}

/** How a changed spec reaches the replicas, as the plan's `rollout` says. */
function howItRolls(plan: Plan): string {
  const rollout = plan.service?.rollout;
  if (rollout?.coherence !== 'revision') return 'changed commands roll one replica at a time';
  const canary = rollout.canary ? `, a canary of ${rollout.canary.traffic_percent}% watched for ${rollout.canary.soak_s} s first` : '';
  return `a new revision rolls in ${rollout.steps} step${rollout.steps === 1 ? '' : 's'} at least${canary}, each step's replicas answering end to end before they take traffic`;
}
