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
 * GPU metrics of an SSH fleet as an operator reads them: a host with two (stand-in) L40S that
 * nvidia-smi reports busy with different figures, a run on that fleet served by `troupe worker
 * --metrics` (the real CLI), then `troupe metrics RUN --json` and a real Prometheus scraping the
 * worker. The runner-level reading is ssh-usage.test.ts; this is the whole path.
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

let env: SshFleetEnv;
let served: SshFleetEnv;
let worker: ChildProcess | null = null;
let prometheus: Prometheus | null = null;
let run: RunHandle | null = null;
let metricsUrl = '';
let stateDir = '';
const fleet = 'gpu-metrics';
let runName = '';

beforeAll(async () => {
  env = await startSshFleetEnv([{ name: 'gpu', gpus: GPUS }]);
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
  const state = await applyFleetYaml(served, fleetYaml(served, fleet, ['gpu']));
  expect(state.hosts.map((h) => h.status)).toEqual(['ready']);
  const yaml = [
    'type: task',
    `name: ${runName}`,
    'groups:',
    '  - name: prefill',
    '    commands:',
    '      - sleep 600',
    '    resources:',
    '      gpu: L40S:2',
    '      cpu: 1..',
    '      memory: 1GB..',
    '      disk: 1GB..',
    '',
  ].join('\n');
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
  it('troupe metrics RUN --json shows each GPU of the job\'s host with its own figures', async () => {
    const metrics = await waitFor('a sample of the prefill job with its GPUs', async () => {
      const result = await troupeCli(served, ['metrics', runName, '--json', '--worker', metricsUrl]);
      if (result.code !== 0) return null;
      const parsed = JSON.parse(result.stdout) as RunMetrics;
      const last = parsed.jobs[0]?.points.at(-1);
      return last && last.gpus.length > 0 ? parsed : null;
    }, 90_000);
    expect(metrics.unreachable).toEqual([]);
    expect(metrics.jobs).toHaveLength(1);
    const [series] = metrics.jobs;
    expect(series?.job).toMatchObject({ run_name: runName, group: 'prefill', rank: 0, job_num: 0, attempt: 0, host: env.hosts.host('gpu').address });
    expect(series?.points.at(-1)?.gpus).toEqual(expected);
    expect(expected[0]?.util_percent).not.toBe(expected[1]?.util_percent);

    // The table users read, from the same figures.
    const table = await troupeCli(served, ['metrics', runName, '--worker', metricsUrl]);
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[1]).toMatch(/#0 NVIDIA L40S 40% 11\.2GiB\/45\.0GiB\s+(now|\d+s ago)$/);
    expect(lines[2]?.trim()).toBe('#1 NVIDIA L40S 65% 22.5GiB/45.0GiB');
  }, 120_000);

  it('a real Prometheus scraping the worker has each GPU\'s utilisation and memory', async () => {
    const labels = `run="${runName}",group="prefill",rank="0"`;
    const byGpu = async (name: string) => {
      const samples = await waitFor(`${name} for both GPUs in Prometheus`, async () => {
        const r = await prometheus?.query(`${name}{${labels}}`);
        return r && r.length === 2 ? r : null;
      }, 60_000);
      return Object.fromEntries(samples.map((s) => [s.metric.gpu, Number(s.value[1])]));
    };
    expect(await byGpu('troupe_job_gpu_utilization_ratio')).toEqual({ '0': 0.4, '1': 0.65 });
    expect(await byGpu('troupe_job_gpu_memory_used_bytes')).toEqual({ '0': expected[0]?.memory_used_bytes, '1': expected[1]?.memory_used_bytes });
    expect(await byGpu('troupe_job_gpu_memory_total_bytes')).toEqual({ '0': GPUS.memoryMiB * MiB, '1': GPUS.memoryMiB * MiB });
    const jobs = await prometheus?.query('troupe_jobs{backend="ssh"}');
    expect(jobs?.map((s) => [s.metric.state, s.value[1]])).toEqual([['running', '1']]);
  }, 90_000);

  it('the run\'s GPU series are gone once it ends', async () => {
    await run?.stop();
    await run?.wait();
    await waitFor('the GPU series gone from the endpoint', async () => {
      const text = await (await fetch(`${metricsUrl}/metrics`)).text();
      return !text.includes(`troupe_job_gpu_utilization_ratio{run="${runName}"`);
    }, 30_000);
    await expectAllClean(served, fleet);
  }, 60_000);
});
