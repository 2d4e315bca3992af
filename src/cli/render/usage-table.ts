import type { JobSeries, UsagePoint } from '../../backends/job-usage';
import type { RunMetrics } from '../../client/run-usage';
import { paint, type Style } from './style';
import { renderTable } from './table';
import { formatAge } from './time-text';

/** `troupe metrics RUN`: a row per job (its latest sample), a row more per extra GPU, like `dstack metrics`. */

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

/** `512MiB`, `1.5GiB`: what a person reads at a glance. */
export function formatBytes(bytes: number): string {
  if (bytes >= GiB) return `${(bytes / GiB).toFixed(1)}GiB`;
  return `${Math.round(bytes / MiB)}MiB`;
}

function memoryText(p: UsagePoint): string {
  return p.memory_limit_bytes === null ? formatBytes(p.memory_bytes) : `${formatBytes(p.memory_bytes)}/${formatBytes(p.memory_limit_bytes)}`;
}

function gpuTexts(p: UsagePoint): string[] {
  return p.gpus.map((g) => `#${g.index} ${g.name} ${Math.round(g.util_percent)}% ${formatBytes(g.memory_used_bytes)}/${formatBytes(g.memory_total_bytes)}`);
}

function jobName(s: JobSeries): string {
  return `${s.job.group}/${s.job.rank}${s.job.attempt > 0 ? ` (attempt ${s.job.attempt})` : ''}`;
}

export function renderUsageTable(metrics: RunMetrics, style: Style, now: Date): string[] {
  const rows: string[][] = [];
  for (const series of metrics.jobs) {
    const p = series.points[series.points.length - 1];
    if (!p) continue;
    const cpu = p.cpu_percent === null ? '-' : `${Math.round(p.cpu_percent)}%`;
    const [first = '-', ...more] = gpuTexts(p);
    rows.push([jobName(series), series.job.host, cpu, memoryText(p), first, formatAge(new Date(p.at_ms).toISOString(), now)]);
    for (const gpu of more) rows.push(['', '', '', '', gpu, '']);
  }
  const lines = rows.length === 0 ? [] : renderTable(['NAME', 'HOST', 'CPU', 'MEMORY', 'GPU', 'SAMPLED'], rows, style, { alignRight: new Set([2]) });
  if (rows.length === 0) lines.push(` No samples of run ${metrics.run_name} yet: its jobs are not running, or no worker that supervises them was asked.`);
  for (const u of metrics.unreachable) lines.push(paint(style, 'yellow', ` Worker ${u.url} did not answer: ${u.error}`));
  return lines;
}
