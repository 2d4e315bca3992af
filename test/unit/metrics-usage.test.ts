import { describe, expect, it } from 'vitest';
import { mergeSeries, workerMetricsUrls } from '../../src/client/run-usage';
import { formatBytes, renderUsageTable } from '../../src/cli/render/usage-table';
import { plain } from '../../src/cli/render/style';
import { pointOf, type JobKey, type JobSeries, type JobUsage } from '../../src/backends/job-usage';
import { parseJobUsage } from '../../src/backends/ssh/usage-script';
import { parseListenAddress } from '../../src/metrics/metrics-server';
import { TroupeMetrics } from '../../src/metrics/troupe-metrics';
import { UsageRings } from '../../src/metrics/usage-rings';

/** Job usage as the worker keeps it and `troupe metrics` shows it: pure parts, no server. */

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

const key = (rank: number, over: Partial<JobKey> = {}): JobKey => ({ run_name: 'pd', group: 'prefill', rank, job_num: rank, attempt: 0, host: 'h1', ...over });
const reading = (at_ms: number, cpu_seconds: number, over: Partial<JobUsage> = {}): JobUsage => ({
  at_ms,
  cpu_seconds,
  memory_bytes: 300 * MiB,
  memory_limit_bytes: 16 * GiB,
  source: 'proc',
  gpus: [],
  ...over,
});

describe('pointOf', () => {
  it('is CPU time over wall time since the reading before, in percent of one core', () => {
    expect(pointOf(reading(0, 10), reading(2_000, 11.5)).cpu_percent).toBe(75);
    expect(pointOf(reading(0, 10), reading(1_000, 12)).cpu_percent).toBe(200);
  });

  it('has no rate for a first reading or a counter that went back (another process tree)', () => {
    expect(pointOf(null, reading(0, 10)).cpu_percent).toBeNull();
    expect(pointOf(reading(0, 10), reading(1_000, 3)).cpu_percent).toBeNull();
  });
});

describe('parseJobUsage (an SSH host\'s answer)', () => {
  // nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits
  // prints one line per GPU, fields joined by ", " (no header, no units); the script prefixes each with "gpu ".
  const answer = (...gpuLines: string[]) => ['result usage proc 1700000000123 ticks 250 314572800 67430744064', ...gpuLines.map((l) => `gpu ${l}`), ''].join('\n');

  it('reads each GPU line nvidia-smi prints, in MiB and percent, as bytes and percent', () => {
    const usage = parseJobUsage(answer('0, NVIDIA H100 80GB HBM3, 87, 61234, 81559', '1, NVIDIA H100 80GB HBM3, 3, 0, 81559'));
    expect(usage).toEqual({
      at_ms: 1700000000123,
      cpu_seconds: 2.5,
      memory_bytes: 314572800,
      memory_limit_bytes: 67430744064,
      source: 'proc',
      gpus: [
        { index: 0, name: 'NVIDIA H100 80GB HBM3', util_percent: 87, memory_used_bytes: 61234 * MiB, memory_total_bytes: 81559 * MiB },
        { index: 1, name: 'NVIDIA H100 80GB HBM3', util_percent: 3, memory_used_bytes: 0, memory_total_bytes: 81559 * MiB },
      ],
    });
  });

  it('skips what is not a GPU line (a failing nvidia-smi may print its message on stdout), and has no GPU without any', () => {
    const failed = answer("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.");
    expect(parseJobUsage(failed)?.gpus).toEqual([]);
    expect(parseJobUsage(answer())?.gpus).toEqual([]);
  });

  it('is null when the job is not running there, and reads a cgroup\'s CPU time in microseconds', () => {
    expect(parseJobUsage('result absent\n')).toBeNull();
    expect(parseJobUsage('result usage cgroup 1700000000000 usec 1500000 1048576 2097152\n')).toMatchObject({ source: 'cgroup', cpu_seconds: 1.5, memory_limit_bytes: 2097152 });
  });
});

describe('UsageRings', () => {
  it('keeps the last N points of a job and at most M jobs, the least lately sampled going first', () => {
    const rings = new UsageRings({ pointsPerJob: 3, jobs: 2 });
    for (let i = 0; i < 5; i++) rings.record(key(0), reading(i * 1000, i));
    expect(rings.series('pd')[0]?.points.map((p) => p.at_ms)).toEqual([2000, 3000, 4000]);
    rings.record(key(1), reading(0, 0));
    rings.record(key(0), reading(5000, 5));
    rings.record(key(2), reading(0, 0));
    expect(rings.series('pd').map((s) => s.job.rank)).toEqual([0, 2]);
  });

  it('answers by run and group; an ended job keeps its series but leaves the gauges', () => {
    const rings = new UsageRings();
    rings.record(key(0), reading(0, 0));
    rings.record(key(1, { group: 'decode' }), reading(0, 0));
    rings.record(key(0, { run_name: 'other' }), reading(0, 0));
    expect(rings.series('pd', 'decode').map((s) => s.job.rank)).toEqual([1]);
    rings.ended(key(0));
    expect(rings.series('pd')).toHaveLength(2);
    expect(rings.latest().map((l) => [l.job.run_name, l.job.rank])).toEqual([
      ['pd', 1],
      ['other', 0],
    ]);
  });
});

describe('per-job gauges', () => {
  it('are labelled run, group, rank (and gpu) with base units, only for jobs still supervised', async () => {
    const metrics = new TroupeMetrics();
    const gpus = [{ index: 0, name: 'L40S', util_percent: 40, memory_used_bytes: 11 * GiB, memory_total_bytes: 45 * GiB }];
    metrics.usage.record(key(0), reading(0, 0, { gpus }));
    metrics.usage.record(key(0), reading(1_000, 0.5, { gpus }));
    metrics.usage.record(key(1), reading(0, 0));
    metrics.usage.ended(key(1));
    const text = await metrics.registry.metrics();
    expect(text).toContain('troupe_job_cpu_cores{run="pd",group="prefill",rank="0"} 0.5');
    expect(text).toContain(`troupe_job_memory_bytes{run="pd",group="prefill",rank="0"} ${300 * MiB}`);
    expect(text).toContain('troupe_job_gpu_utilization_ratio{run="pd",group="prefill",rank="0",gpu="0"} 0.4');
    expect(text).toContain(`troupe_job_gpu_memory_total_bytes{run="pd",group="prefill",rank="0",gpu="0"} ${45 * GiB}`);
    expect(text).not.toContain('rank="1"');
  });

  it('are bounded: at most maxJobSeries jobs', async () => {
    const metrics = new TroupeMetrics({ maxJobSeries: 2 });
    for (let rank = 0; rank < 5; rank++) metrics.usage.record(key(rank), reading(0, 0));
    const text = await metrics.registry.metrics();
    expect(text.match(/^troupe_job_memory_bytes\{/gm)).toHaveLength(2);
  });
});

describe('mergeSeries', () => {
  it('keeps one series per job attempt, the one sampled last, in rank order', () => {
    const series = (rank: number, at: number, attempt = 0): JobSeries => ({ job: key(rank, { attempt }), points: [pointOf(null, reading(at, 0))] });
    const merged = mergeSeries([[series(1, 100), series(0, 50)], [series(1, 200), series(1, 10, 1)]]);
    expect(merged.map((s) => [s.job.rank, s.job.attempt, s.points[0]?.at_ms])).toEqual([
      [0, 0, 50],
      [1, 0, 200],
      [1, 1, 10],
    ]);
  });
});

describe('renderUsageTable', () => {
  const now = new Date(10_000);
  it('shows a row per job with CPU, memory used / limit, the first GPU, and a row per further GPU', () => {
    const gpu = (index: number) => ({ index, name: 'L40S', util_percent: 40 + index * 25, memory_used_bytes: 11.5 * GiB, memory_total_bytes: 45 * GiB });
    const lines = renderUsageTable(
      {
        run_name: 'pd',
        jobs: [
          { job: key(0), points: [pointOf(reading(7_000, 1), reading(8_000, 1.98))] },
          { job: key(0, { group: 'decode', job_num: 1, host: 'gpu-1' }), points: [pointOf(null, reading(10_000, 0, { memory_bytes: 2 * GiB, gpus: [gpu(0), gpu(1)] }))] },
        ],
        unreachable: [],
      },
      plain,
      now,
    );
    expect(lines).toEqual([
      ' NAME       HOST   CPU  MEMORY          GPU                          SAMPLED',
      ' prefill/0  h1     98%  300MiB/16.0GiB  -                            2s ago',
      ' decode/0   gpu-1    -  2.0GiB/16.0GiB  #0 L40S 40% 11.5GiB/45.0GiB  now',
      '                                        #1 L40S 65% 11.5GiB/45.0GiB',
    ]);
  });

  it('says when there is nothing yet, and which workers did not answer', () => {
    const lines = renderUsageTable({ run_name: 'pd', jobs: [], unreachable: [{ url: 'http://127.0.0.1:9464', error: 'fetch failed' }] }, plain, now);
    expect(lines[0]).toContain('No samples of run pd yet');
    expect(lines[1]).toBe(' Worker http://127.0.0.1:9464 did not answer: fetch failed');
  });

  it('prints sizes in binary units', () => {
    expect(formatBytes(300 * MiB)).toBe('300MiB');
    expect(formatBytes(1.5 * GiB)).toBe('1.5GiB');
  });
});

describe('addresses', () => {
  it('parses HOST:PORT and a bare port (loopback), refuses the rest', () => {
    expect(parseListenAddress('127.0.0.1:9464')).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(parseListenAddress('9464')).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(parseListenAddress('[::1]:9464')).toEqual({ host: '::1', port: 9464 });
    expect(() => parseListenAddress('localhost')).toThrow(/HOST:PORT/);
    expect(() => parseListenAddress('1.2.3.4:99999')).toThrow(/HOST:PORT/);
  });

  it('reads the workers\' endpoints from TROUPE_METRICS_URL', () => {
    expect(workerMetricsUrls({})).toEqual(['http://127.0.0.1:9464']);
    expect(workerMetricsUrls({ TROUPE_METRICS_URL: 'http://a:1, http://b:2' })).toEqual(['http://a:1', 'http://b:2']);
  });
});
