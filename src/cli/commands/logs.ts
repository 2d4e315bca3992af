import { parseArgs } from 'node:util';
import type { JobState } from '../../client';
import { CliError, runNameArgument, type Command } from '../command';
import { connectClient, connectionHelp, connectionOptions, connectionSettings } from '../connection';
import { onInterrupt } from '../interrupt';
import { cliErrorOf } from '../render/client-errors';
import { LogLines } from '../render/log-lines';
import { nodeName } from '../render/run-table';
import { parseOrUsage, renderUsage } from '../render/usage';
import { writeRaw } from '../render/control-chars';

const options = {
  job: { type: 'string' },
  group: { type: 'string' },
  attempt: { type: 'string' },
  follow: { type: 'boolean', short: 'f' },
  help: { type: 'boolean', short: 'h' },
  ...connectionOptions,
} as const;

const help = renderUsage(
  'troupe logs RUN [--job N [--attempt K] | --group NAME] [-f]',
  [
    "Prints a job's log (job 0, the global master, by default). With --group, the log of every node of",
    'that group, each line prefixed with its node (`prefill/1 | `). With -f, follows until the run ends.',
    "A node restarted by its group's on_failure keeps the logs of its earlier machines: --attempt K.",
  ].join('\n'),
  [
    ['--job N', 'the job with global rank N'],
    ['--group NAME', "every node of group NAME"],
    ['--attempt K', "the job's attempt K (0: its first machine; `troupe ps` counts restarts), default the current one"],
    ['-f, --follow', 'keep printing until the run ends (Ctrl-C stops following, not the run)'],
    ...connectionHelp,
  ],
);

/** The jobs the flags name, from the run's state. */
function selectJobs(jobs: JobState[], job: string | undefined, group: string | undefined): JobState[] {
  if (job !== undefined && group !== undefined) throw new CliError('give --job or --group, not both', 2);
  if (group !== undefined) {
    const selected = jobs.filter((j) => j.group_name === group);
    if (selected.length === 0) {
      const groups = [...new Set(jobs.map((j) => j.group_name))].join(', ');
      throw new CliError(`the run has no group "${group}" (its groups: ${groups || 'none known'})`);
    }
    return selected;
  }
  const jobNum = job === undefined ? 0 : Number(job);
  if (!Number.isInteger(jobNum) || jobNum < 0) throw new CliError(`--job wants a job number (0, 1, …), got "${job}"`, 2);
  const selected = jobs.find((j) => j.job_num === jobNum);
  if (!selected) {
    throw new CliError(jobs.length > 0 ? `the run has no job ${jobNum} (its jobs are 0..${jobs.length - 1})` : 'the run has no jobs known to Troupe');
  }
  return [selected];
}

/** `--attempt K`: one job's earlier machine, so only beside --job (or the default job 0). */
function attemptArgument(attempt: string | undefined, group: string | undefined): number | undefined {
  if (attempt === undefined) return undefined;
  if (group !== undefined) throw new CliError("--attempt reads one job's earlier machine: give --job N, not --group", 2);
  if (!/^\d+$/.test(attempt) || !Number.isSafeInteger(Number(attempt))) throw new CliError(`--attempt wants an attempt number (0, 1, …), got "${attempt}"`, 2);
  return Number(attempt);
}

export const command: Command = async (args) => {
  const { values, positionals } = parseOrUsage(() => parseArgs({ args, options, allowPositionals: true }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  const [runName, ...extra] = positionals;
  if (runName === undefined || extra.length > 0) throw new CliError(`logs needs exactly one run name\n\n${help}`, 2);
  runNameArgument(runName);
  const attempt = attemptArgument(values.attempt, values.group);
  const settings = connectionSettings(values);
  const troupe = await connectClient(settings);
  const interrupt = onInterrupt();
  try {
    const handle = troupe.run(runName);
    const jobs = selectJobs((await handle.state()).jobs, values.job, values.group);
    const names = new Map(jobs.map((j) => [j.job_num, nodeName(j)]));
    const width = Math.max(...[...names.values()].map((n) => n.length));
    const lines = new LogLines(
      (text) => writeRaw(process.stdout, text),
      jobs.length > 1 ? (jobNum) => `${(names.get(jobNum) ?? String(jobNum)).padEnd(width)} | ` : () => '',
    );
    let noted = false;
    const stream = (async () => {
      for await (const chunk of handle.streamLogs({
        jobs: jobs.map((j) => j.job_num),
        follow: values.follow === true,
        ...(attempt === undefined ? {} : { attempt }),
        signal: interrupt.signal,
        onUnavailable: (err) => {
          if (!noted) process.stderr.write(`${err.message} Still trying…\n`);
          noted = true;
        },
      })) {
        noted = false;
        lines.push(chunk.job_num, chunk.data);
      }
    })();
    stream.catch(() => undefined);
    const outcome = await Promise.race([stream, interrupt.interrupted]);
    lines.flush();
    if (outcome === 'interrupted') return await interrupt.letGo();
    const waiting = jobs.filter((j) => j.instance === null);
    if (!values.follow && waiting.length > 0) {
      process.stderr.write(`${waiting.map((j) => `${nodeName(j)} has no node yet (${j.status})`).join('\n')}\n`);
    }
    return 0;
  } catch (err) {
    throw cliErrorOf(err);
  } finally {
    interrupt.dispose();
    await troupe.close();
  }
};
