import { parseArgs } from 'node:util';
import type { RolloutControlResult, RolloutStatus, RunHandle } from '../../client';
import { CliError, runNameArgument, type Command } from '../command';
import { connectClient, connectionHelp, connectionOptions, connectionSettings, type ConnectionFlags } from '../connection';
import { onInterrupt, type Interrupt } from '../interrupt';
import { cliErrorOf } from '../render/client-errors';
import { describeRollbackEnd, describeRollout } from '../render/rollout-text';
import { parseOrUsage, renderUsage } from '../render/usage';

const options = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  ...connectionOptions,
} as const;

const help = renderUsage(
  'troupe rollout status|pause|resume|rollback RUN [--json]',
  [
    'A service\'s rollout (a deployment with rollout.coherence: revision), seen and steered by hand.',
    '  status    the last rollout: deployment, revisions, phase, paused, canary share and gate, error,',
    '            whether it can be rolled back',
    '  pause     stops it where it is: no next step, its progress deadline and canary soak stopped',
    '  resume    goes on from where it was paused',
    '  rollback  rolls back the rollout under way (the old revision serves throughout), or, once one went',
    '            through, deploys the spec it replaced again; waits until it is over (Ctrl-C leaves it going)',
    'A refusal (none under way, paused already, the old revision being stopped…) exits 1 with the run\'s reason.',
  ].join('\n'),
  [['--json', 'the rollout as JSON (the run state\'s service.rollout; after pause, resume or rollback: as it is then)'], ...connectionHelp],
);

const ACTIONS = ['status', 'pause', 'resume', 'rollback'] as const;
export type RolloutSubcommand = (typeof ACTIONS)[number];

export interface RolloutArguments {
  action: RolloutSubcommand;
  run: string;
  json: boolean;
  connection: ConnectionFlags;
}

function isAction(word: string): word is RolloutSubcommand {
  return (ACTIONS as readonly string[]).includes(word);
}

/** The command line of `troupe rollout`, checked before any connection (null: help asked). Bad usage exits 2. */
export function parseRolloutArgs(args: string[]): RolloutArguments | null {
  const { values, positionals } = parseOrUsage(() => parseArgs({ args, options, allowPositionals: true }), help);
  if (values.help) return null;
  const [action, run, ...extra] = positionals;
  if (action === undefined || run === undefined || extra.length > 0) {
    throw new CliError(`rollout needs an action (${ACTIONS.join(', ')}) and a run name\n\n${help}`, 2);
  }
  if (!isAction(action)) throw new CliError(`no rollout action ${JSON.stringify(action)}: ${ACTIONS.join(', ')}\n\n${help}`, 2);
  const { json, help: _help, ...connection } = values;
  return { action, run: runNameArgument(run), json: json === true, connection };
}

export const command: Command = async (args) => {
  const parsed = parseRolloutArgs(args);
  if (!parsed) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  const troupe = await connectClient(connectionSettings(parsed.connection));
  let interrupt: Interrupt | null = null;
  // --json: the rollout itself, whatever was asked; otherwise the words for it.
  const print = (rollout: RolloutStatus | null, words: () => string): void => {
    process.stdout.write(`${parsed.json ? JSON.stringify(rollout, null, 2) : words()}\n`);
  };
  try {
    const run = troupe.run(parsed.run);
    if (parsed.action === 'status') {
      const state = await run.state();
      if (!state.service) throw new CliError(`run ${parsed.run} is not a service: it has no rollouts`, 1);
      const rollout = state.service.rollout;
      print(rollout, () => describeRollout(parsed.run, rollout).join('\n'));
      return 0;
    }
    if (parsed.action !== 'rollback') {
      const result = await steer(run, parsed.action);
      print(result.rollout, () => describeRollout(parsed.run, result.rollout).join('\n'));
      return 0;
    }
    // Only a rollback waits: Ctrl-C lets go of it, and the run goes on.
    interrupt = onInterrupt();
    process.stderr.write(`Rolling back the rollout of ${parsed.run}…\n`);
    const rolling = run.rollbackRollout();
    rolling.catch(() => undefined);
    const result = await Promise.race([rolling, interrupt.interrupted]);
    if (result === 'interrupted') {
      process.stderr.write('\nThe run goes on rolling back; `troupe rollout status` shows where it is.\n');
      return await interrupt.letGo();
    }
    print(result.rollout, () => describeRollbackEnd(parsed.run, result.rollout));
    return 0;
  } catch (err) {
    throw cliErrorOf(err);
  } finally {
    interrupt?.dispose();
    await troupe.close();
  }
};

async function steer(run: RunHandle, action: 'pause' | 'resume'): Promise<RolloutControlResult> {
  return action === 'pause' ? await run.pauseRollout() : await run.resumeRollout();
}
