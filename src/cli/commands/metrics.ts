import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { onInterrupt } from '../interrupt';
import { fetchRunMetrics, workerMetricsUrls } from '../../client/run-usage';
import { runNameArgument, CliError, type Command } from '../command';
import { styleFor } from '../render/style';
import { parseOrUsage, renderUsage } from '../render/usage';
import { renderUsageTable } from '../render/usage-table';

const options = {
  group: { type: 'string', short: 'g' },
  watch: { type: 'boolean', short: 'w' },
  worker: { type: 'string', multiple: true },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

const help = renderUsage(
  'troupe metrics RUN [--group G] [--watch] [--worker URL]...',
  [
    'Per job of the run: CPU, memory used / limit, and each GPU\'s utilisation and memory, as sampled on',
    'the nodes by the workers that supervise the jobs (`troupe worker --metrics`), every 5 s by default.',
  ].join('\n'),
  [
    ['-g, --group G', 'only the jobs of this group'],
    ['-w, --watch', 'redraw every 2 s until Ctrl-C'],
    ['--worker URL', 'a worker\'s metrics endpoint (repeatable; env TROUPE_METRICS_URL, comma-separated; default http://127.0.0.1:9464)'],
    ['--json', 'every sample the workers hold, as JSON'],
  ],
);

const WATCH_MS = 2_000;

export const command: Command = async (args) => {
  const { values, positionals } = parseOrUsage(() => parseArgs({ args, options, allowPositionals: true }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  if (positionals.length !== 1) throw new CliError(`troupe metrics takes one RUN\n\n${help}`, 2);
  const run = runNameArgument(positionals[0] as string);
  const workers = values.worker && values.worker.length > 0 ? values.worker : workerMetricsUrls();
  for (const url of workers) {
    if (!URL.canParse(url)) throw new CliError(`--worker wants a URL such as http://127.0.0.1:9464, not "${url}"`, 2);
  }
  const style = styleFor(process.stdout);
  const read = () => fetchRunMetrics(run, { workers, ...(values.group !== undefined ? { group: values.group } : {}) });
  if (values.json) {
    process.stdout.write(`${JSON.stringify(await read(), null, 2)}\n`);
    return 0;
  }
  if (!values.watch) {
    const metrics = await read();
    process.stdout.write(`${renderUsageTable(metrics, style, new Date()).join('\n')}\n`);
    return metrics.unreachable.length === workers.length ? 1 : 0;
  }
  const interrupt = onInterrupt();
  try {
    for (;;) {
      const metrics = await Promise.race([read(), interrupt.interrupted]);
      if (metrics === 'interrupted') break;
      const lines = renderUsageTable(metrics, style, new Date());
      // Redrawn in place on a terminal; appended otherwise (a log keeps every frame).
      process.stdout.write(process.stdout.isTTY ? `\x1b[H\x1b[2J${lines.join('\n')}\n` : `${lines.join('\n')}\n\n`);
      if ((await Promise.race([sleep(WATCH_MS), interrupt.interrupted])) === 'interrupted') break;
    }
    return await interrupt.letGo();
  } finally {
    interrupt.dispose();
  }
};
