import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runDirectory } from '../../src/backends/ssh/job-paths';
import { TroupeClient, type RunHandle } from '../../src/client';
import type { RunMetrics } from '../../src/client/run-usage';
import { FleetClient } from '../../src/fleet/fleet-client';
import { freePort } from '../helpers/free-port';
import { prometheusInstalled, startPrometheus, type Prometheus } from '../helpers/prometheus';
import { uniqueTaskQueue } from '../helpers/temporal';
import { kill9 } from '../helpers/worker-process-control';
import { fakeGpuLoad, type FakeGpus } from './hosts/fake-gpu-tools';
import { waitFor } from './local-fixtures';
import { applyFleetYaml, expectAllClean, fleetYaml, startCliWorker, startSshFleetEnv, troupeCli, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * GPU metrics of an SSH fleet as an operator reads them: a fleet of two hosts, one with two
 * (stand-in) L40S that nvidia-smi reports busy with different figures, one with no GPU; a run
 * with a group that asks for both GPUs and a group that asks for none, served by `troupe worker
 * --metrics` (the real CLI). Its endpoint, `troupe metrics RUN` and a real Prometheus scraping
 * the worker show the GPU job's two GPUs with the stand-in's figures and no GPU for the other
 * job; once the run ends the series are gone from the endpoint and from Prometheus. The
 * runner-level reading is ssh-usage.test.ts; this is the whole path.
 */

const GPUS: FakeGpus = { name: 'NVIDIA L40S', memoryMiB: 46068, count: 2 };
const MiB = 1024 * 1024;
/** What each GPU must show: the figures the stand-in nvidia-smi prints for it. */
const expected = [0, 1].map((index) => ({
  index,
  name: GPUS.name,
  util_percent: fakeGpuLoad(GPUS, index).utilization,
  memory_used_bytes: fakeGpuLoad(GPUS, index).memoryUsedMiB * MiB,
  memory_total_bytes: GPUS.memoryMiB * MiB,
}));
const GPU_METRICS = ['troupe_job_gpu_utilization_ratio', 'troupe_job_gpu_memory_used_bytes', 'troupe_job_gpu_memory_total_bytes'] as const;
/** Each GPU metric's value per GPU index, as the figures above give it. */
const expectedByGpu: Record<(typeof GPU_METRICS)[number], Record<string, number>> = {
  troupe_job_gpu_utilization_ratio: Object.fromEntries(expected.map((g) => [String(g.index), g.util_percent / 100])),
  troupe_job_gpu_memory_used_bytes: Object.fromEntries(expected.map((g) => [String(g.index), g.memory_used_bytes])),
  troupe_job_gpu_memory_total_bytes: Object.fromEntries(expected.map((g) => [String(g.index), g.memory_total_bytes])),
};

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of Prometheus's text format (`name{a="b",…} value`); comments skipped. */
function samplesOf(exposition: string): Sample[] {
  const out: Sample[] = [];
  for (const line of exposition.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1] ?? ''] = l[2] ?? '';
    out.push({ name: m[1] ?? '', labels, value: Number(m[3]) });
  }
  return out;
}

let env: SshFleetEnv;
let served: SshFleetEnv;
let worker: ChildProcess | null = null;
let prometheus: Prometheus | null = null;
let run: RunHandle | null = null;
let metricsUrl = '';
let stateDir = '';
const fleet = 'gpu-metrics';
let runName = '';

/** The run's samples on the worker's endpoint now. */
async function endpointSamples(): Promise<Sample[]> {
  const text = await (await fetch(`${metricsUrl}/metrics`)).text();
  return samplesOf(text).filter((s) => s.labels.run === runName);
}

beforeAll(async () => {
  env = await startSshFleetEnv([{ name: 'gpu', gpus: GPUS }, { name: 'cpu' }]);
  // `troupe worker` as users run it, on a task queue of its own, serving its metrics.
  const taskQueue = uniqueTaskQueue('ssh-gpu-metrics');
  served = { ...env, taskQueue, fleets: new FleetClient(env.client, { taskQueue }), troupe: new TroupeClient(env.client, { taskQueue }) };
  runName = `gpu-metrics-${taskQueue.slice(-8)}`;
  stateDir = mkdtempSync(join(env.dir, 'worker-state-'));
  const port = await freePort();
  metricsUrl = `http://127.0.0.1:${port}`;
  worker = await startCliWorker(
    { TROUPE_TASK_QUEUE: taskQueue, TROUPE_STATE_DIR: stateDir, TROUPE_KNOWN_HOSTS: env.hosts.knownHostsFile, TROUPE_USAGE_INTERVAL_S: '1' },
    ['--metrics', `127.0.0.1:${port}`],
  );
  prometheus = await startPrometheus(env.dir, [`127.0.0.1:${port}`]);
  const state = await applyFleetYaml(served, fleetYaml(served, fleet, ['gpu', 'cpu']));
  expect(state.hosts.map((h) => h.status)).toEqual(['ready', 'ready']);
  const group = (name: string, gpu: string) => [`  - name: ${name}`, '    commands:', '      - sleep 600', '    resources:', `      gpu: ${gpu}`, '      cpu: 1..', '      memory: 1GB..', '      disk: 1GB..'];
  const yaml = ['type: task', `name: ${runName}`, 'groups:', ...group('train', 'L40S:2'), ...group('prep', '0'), ''].join('\n');
  run = await served.troupe.submit({ yaml, fleets: [fleet], options: { stop_grace_s: 1 } });
}, 180_000);

afterAll(async () => {
  await run?.stop().catch(() => undefined);
  const end = await run?.wait().catch(() => null);
  // The job's folder (its log) stays on the host after the run, as users get it: not in a test.
  for (const base of new Set(end?.jobs.flatMap((j) => j.instance?.details.base_dir ?? []))) if (end) rmSync(runDirectory(base, end.run_uid), { recursive: true, force: true });
  await served?.fleets.delete(fleet, { force: true }).catch(() => undefined);
  if (worker) await kill9(worker);
  await prometheus?.stop();
  await env?.close();
}, 120_000);

describe.skipIf(!prometheusInstalled())('troupe metrics over an SSH fleet with GPUs', () => {
  it('the worker\'s endpoint has a series per GPU of the GPU job with the stand-in\'s figures, none for the GPU-less job', async () => {
    const samples = await waitFor('both jobs sampled, the GPU job with its GPUs, on the endpoint', async () => {
      const now = await endpointSamples();
      const sampled = new Set(now.filter((s) => s.name === 'troupe_job_memory_bytes').map((s) => s.labels.group));
      const gpus = now.filter((s) => s.name === 'troupe_job_gpu_utilization_ratio');
      return sampled.has('train') && sampled.has('prep') && gpus.length > 0 ? now : null;
    }, 90_000);
    for (const name of GPU_METRICS) {
      const series = samples.filter((s) => s.name === name);
      expect(series.map((s) => s.labels).sort((a, b) => (a.gpu ?? '').localeCompare(b.gpu ?? ''))).toEqual(
        ['0', '1'].map((gpu) => ({ run: runName, group: 'train', rank: '0', gpu })),
      );
      expect(Object.fromEntries(series.map((s) => [s.labels.gpu, s.value]))).toEqual(expectedByGpu[name]);
    }
    expect(expected[0]?.util_percent).not.toBe(expected[1]?.util_percent);
    expect(expected[0]?.memory_used_bytes).not.toBe(expected[1]?.memory_used_bytes);
  }, 120_000);

  it('troupe metrics RUN shows each GPU of the GPU job\'s host with its own figures, and no GPU for the other', async () => {
    const result = await troupeCli(served, ['metrics', runName, '--json', '--worker', metricsUrl]);
    expect(result.code, result.stderr).toBe(0);
    const metrics = JSON.parse(result.stdout) as RunMetrics;
    expect(metrics.unreachable).toEqual([]);
    const train = metrics.jobs.find((s) => s.job.group === 'train');
    const prep = metrics.jobs.find((s) => s.job.group === 'prep');
    expect(metrics.jobs).toHaveLength(2);
    expect(train?.job).toMatchObject({ run_name: runName, rank: 0, attempt: 0, host: env.hosts.host('gpu').address });
    expect(train?.points.at(-1)?.gpus).toEqual(expected);
    expect(prep?.job).toMatchObject({ run_name: runName, rank: 0, attempt: 0, host: env.hosts.host('cpu').address });
    expect(prep?.points.at(-1)?.gpus).toEqual([]);

    // The table users read, from the same figures: a row per job, a row more for the second GPU.
    const table = await troupeCli(served, ['metrics', runName, '--worker', metricsUrl]);
    expect(table.code, table.stderr).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    const trainRow = lines.findIndex((l) => l.trimStart().startsWith('train/0'));
    expect(lines[trainRow]).toMatch(/#0 NVIDIA L40S 40% 11\.2GiB\/45\.0GiB\s+(now|\d+s ago)$/);
    expect(lines[trainRow + 1]?.trim()).toBe('#1 NVIDIA L40S 65% 22.5GiB/45.0GiB');
    expect(lines.find((l) => l.trimStart().startsWith('prep/0'))).toMatch(/\s-\s+(now|\d+s ago)$/);
  }, 60_000);

  it('a real Prometheus scraping the worker has each GPU\'s utilisation and memory', async () => {
    for (const name of GPU_METRICS) {
      const samples = await waitFor(`${name} for both GPUs in Prometheus`, async () => {
        const r = await prometheus?.query(`${name}{run="${runName}"}`);
        return r && r.length === 2 ? r : null;
      }, 60_000);
      expect(samples.map((s) => [s.metric.group, s.metric.rank]).sort()).toEqual([['train', '0'], ['train', '0']]);
      expect(Object.fromEntries(samples.map((s) => [s.metric.gpu, Number(s.value[1])]))).toEqual(expectedByGpu[name]);
    }
    const jobs = await prometheus?.query('troupe_jobs{backend="ssh"}');
    expect(jobs?.map((s) => [s.metric.state, s.value[1]])).toEqual([['running', '2']]);
  }, 90_000);

  it('the run\'s series are gone once it ends, from the endpoint and from Prometheus', async () => {
    await run?.stop();
    await run?.wait();
    await waitFor('the run\'s series gone from the endpoint', async () => (await endpointSamples()).length === 0, 30_000);
    // The next scrape without them marks them stale: an instant query no longer returns them.
    await waitFor('the run\'s series gone from Prometheus', async () => {
      const left = await prometheus?.query(`{run="${runName}"}`);
      return left?.length === 0;
    }, 30_000);
    await expectAllClean(served, fleet);
  }, 60_000);
});
