import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobRef } from '../../src/backends/backend';
import { closeAllSshSessions, HostKeyTrust, SshRunner } from '../../src/backends/ssh';
import { renderUsageTable } from '../../src/cli/render/usage-table';
import { plain } from '../../src/cli/render/style';
import { pointOf } from '../../src/backends/job-usage';
import { renderLaunchScript } from '../../src/runner/launch-script';
import { createTestHosts, type TestHosts } from './hosts';
import { fakeGpuLoad, type FakeGpus } from './hosts/fake-gpu-tools';

/** A job's usage read on a real SSH host with fake GPUs: its processes' memory and CPU, the GPUs' figures from nvidia-smi's query. */

const GPUS: FakeGpus = { name: 'NVIDIA L40S', memoryMiB: 46068, count: 2 };
const MiB = 1024 * 1024;
const ALLOCATED = 200 * MiB;

describe('SshRunner.usage', () => {
  let hosts: TestHosts;
  let runner: SshRunner;
  let job: JobRef;

  beforeAll(async () => {
    hosts = await createTestHosts([{ name: 'gpu', gpus: GPUS }]);
    runner = new SshRunner(hosts.target('gpu'), { trust: new HostKeyTrust({ knownHostsFiles: [hosts.knownHostsFile] }), baseDir: hosts.host('gpu').jobBaseDir });
    const runId = `run-${randomUUID().slice(0, 8)}`;
    job = {
      run_id: runId,
      run_name: 'usage-test',
      submission: 0,
      job_num: 0,
      job_name: 'job-0',
      instance: { instance_id: `${runId}-0-job-0`, host: 'gpu', internal_ip: hosts.host('gpu').address, gpus: 2, details: {} },
    };
  }, 120_000);

  afterAll(async () => {
    await runner?.stopJob(job, 1).catch(() => undefined);
    await closeAllSshSessions();
    await hosts?.destroy();
  }, 60_000);

  it('is null before the job runs; then memory, CPU and every GPU of the host', async () => {
    expect(await runner.usage(job)).toBeNull();
    await runner.startJob(job, {
      env: {},
      hostfile: '',
      script: renderLaunchScript({ commands: [`python3 -c "b = b'x' * ${ALLOCATED}; any(iter(int, 1))"`], workingDir: null, image: null }),
    });
    let first = await runner.usage(job);
    const deadline = Date.now() + 30_000;
    while ((first === null || first.memory_bytes < ALLOCATED) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      first = await runner.usage(job);
    }
    await new Promise((r) => setTimeout(r, 1_500));
    const second = await runner.usage(job);
    expect(first).not.toBeNull();
    expect(second).not.toBeNull();
    if (!first || !second) return;
    expect(second.source).toBe('proc');
    expect(second.memory_bytes).toBeGreaterThanOrEqual(ALLOCATED);
    expect(second.memory_bytes).toBeLessThanOrEqual(ALLOCATED * 1.1);
    expect(pointOf(first, second).cpu_percent).toBeGreaterThan(0);
    expect(second.gpus).toEqual(
      [0, 1].map((index) => ({
        index,
        name: GPUS.name,
        util_percent: fakeGpuLoad(GPUS, index).utilization,
        memory_used_bytes: fakeGpuLoad(GPUS, index).memoryUsedMiB * MiB,
        memory_total_bytes: GPUS.memoryMiB * MiB,
      })),
    );
    const key = { run_name: 'usage-test', group: 'prefill', rank: 0, job_num: 0, attempt: 0, host: 'gpu' };
    const table = renderUsageTable({ run_name: 'usage-test', jobs: [{ job: key, points: [pointOf(first, second)] }], unreachable: [] }, plain, new Date(second.at_ms));
    expect(table[1]).toMatch(/^ prefill\/0\s+gpu\s+\d+%\s+2\d\dMiB\/[\d.]+GiB\s+#0 NVIDIA L40S 40% 11\.2GiB\/45\.0GiB\s+now$/);
    expect(table[2]?.trim()).toBe('#1 NVIDIA L40S 65% 22.5GiB/45.0GiB');
  });

  it('is null once the job has ended', async () => {
    await runner.stopJob(job, 1);
    expect(await runner.usage(job)).toBeNull();
  });
});
