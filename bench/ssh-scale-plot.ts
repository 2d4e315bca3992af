/**
 * The plot of bench/ssh-scale.ts: its rounds beside the floor, and what 64 running jobs cost.
 * Drawn from the JSON the bench writes; `npx tsx bench/ssh-scale-plot.ts` draws it again from
 * bench/results/ssh-scale.json.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { resultsDir } from './harness/results';
import { stackedBarChart, stackVertically, writePng } from './plot/charts';

const RoundSchema = z.object({ allRunning: z.number(), end: z.number() });
export const SshScaleResultsSchema = z.object({
  bashrc: z.boolean(),
  floors: z.array(RoundSchema),
  runs: z.array(RoundSchema),
  hold: z
    .object({
      seconds: z.number(),
      commandsSent: z.number(),
      workerCpuMsPerJobPerS: z.number(),
      hostsCpuMsPerJobPerS: z.number(),
      serverCpuMsPerJobPerS: z.number(),
      workerRssMiB: z.number(),
    })
    .optional(),
});
export type SshScaleResults = z.infer<typeof SshScaleResultsSchema>;

const seconds = (ms: number) => Math.round(ms / 10) / 100;

export async function plotSshScale(results: SshScaleResults): Promise<string> {
  const rows = [
    ...results.floors.map((r, i) => ({ label: `floor, round ${i + 1}`, round: r })),
    ...results.runs.map((r, i) => ({ label: `Troupe, round ${i + 1}`, round: r })),
  ].map(({ label, round }) => ({
    label,
    segments: [seconds(round.allRunning), seconds(round.end - round.allRunning)],
    note: `${seconds(round.allRunning)} / ${seconds(round.end)} s`,
  }));
  const rounds = stackedBarChart({
    title: '64 sshd hosts, 64 nodes in 3 groups',
    subtitle: `floor: 64 parallel ssh sessions; ${results.bashrc ? "with root's .bashrc" : 'without .bashrc'}; notes: all running / end`,
    unit: 'seconds from submit',
    width: 1120,
    legend: ['submit -> all 64 running', 'all running -> end'],
    rows,
  });
  const panels = [rounds];
  const { hold } = results;
  if (hold) {
    panels.push(
      stackedBarChart({
        title: `64 jobs held running ${hold.seconds} s`,
        subtitle: `${hold.commandsSent} commands sent; worker RSS ${Math.round(hold.workerRssMiB)} MiB`,
        unit: 'ms of CPU per job per second',
        legend: ['CPU'],
        rows: [
          { label: 'worker', segments: [hold.workerCpuMsPerJobPerS], note: `${hold.workerCpuMsPerJobPerS.toFixed(2)} ms` },
          { label: 'hosts', segments: [hold.hostsCpuMsPerJobPerS], note: `${hold.hostsCpuMsPerJobPerS.toFixed(2)} ms` },
          { label: 'Temporal server', segments: [hold.serverCpuMsPerJobPerS], note: `${hold.serverCpuMsPerJobPerS.toFixed(2)} ms` },
        ],
      }),
    );
  }
  const path = join(resultsDir(), 'ssh-scale.png');
  await writePng(path, stackVertically(panels));
  return path;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const results = SshScaleResultsSchema.parse(JSON.parse(readFileSync(join(resultsDir(), 'ssh-scale.json'), 'utf8')));
  console.log(`wrote ${await plotSshScale(results)}`);
}
