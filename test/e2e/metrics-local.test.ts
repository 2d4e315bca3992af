import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeClient, type RunHandle } from '../../src/client';
import type { RunMetrics } from '../../src/client/run-usage';
import { projectRoot } from '../../src/devserver/dev-server';
import { freePort } from '../helpers/free-port';
import { prometheusInstalled, startPrometheus, type Prometheus, type PromSample } from '../helpers/prometheus';
import { temporalAddress, testClient, uniqueTaskQueue } from '../helpers/temporal';

/**
 * The worker's metrics as an operator reads them: `troupe worker --metrics` (the real CLI, the
 * local fleet), a prefill/decode run whose prefill job holds a known amount of memory and burns
 * one core, `troupe metrics RUN` and a real Prometheus (Debian's) scraping the worker's endpoint.
 */

const cli = fileURLToPath(new URL('../../bin/troupe.js', import.meta.url));
const ALLOCATED = 300 * 1024 * 1024;
const scratch = mkdtempSync(join(tmpdir(), 'troupe-metrics-'));
const queue = uniqueTaskQueue('metrics');
const runName = `metrics-pd-${queue.slice(-8)}`;
const children: ChildProcess[] = [];
let metricsUrl = '';
let prometheus: Prometheus | null = null;
let troupe: TroupeClient;
let run: RunHandle;
let closeClient: () => Promise<void> = async () => undefined;

function start(command: string, args: string[], env: Record<string, string>, ready: RegExp): Promise<{ child: ChildProcess; output: () => string }> {
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let output = '';
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  return new Promise((resolve, reject) => {
    const deadline = setTimeout(() => reject(new Error(`${command} did not start within 60 s:\n${output}`)), 60_000);
    const check = setInterval(() => {
      if (ready.test(output)) {
        clearTimeout(deadline);
        clearInterval(check);
        resolve({ child, output: () => output });
      } else if (child.exitCode !== null) {
        clearTimeout(deadline);
        clearInterval(check);
        reject(new Error(`${command} exited ${child.exitCode}:\n${output}`));
      }
    }, 100);
  });
}

async function until<T>(what: string, fn: () => Promise<T | null>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown = null;
  for (;;) {
    try {
      const value = await fn();
      if (value !== null) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (${String(last)})` : ''}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

function troupeCli(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [cli, ...args], { env: { ...process.env, NO_COLOR: '1', TROUPE_METRICS_URL: metricsUrl }, encoding: 'utf8', timeout: 30_000 });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** The job's own CPU % between two times, interpolated from its `t=WALL c=CPU` lines; null until they cover the interval. */
function ownCpuPercent(log: string, from: number, to: number): number | null {
  const marks = [...log.matchAll(/^t=([\d.]+) c=([\d.]+)$/gm)].map((m) => ({ t: Number(m[1]), c: Number(m[2]) }));
  const at = (t: number): number | null => {
    const i = marks.findIndex((m) => m.t >= t);
    if (i <= 0) return null;
    const a = marks[i - 1]!;
    const b = marks[i]!;
    return a.c + ((b.c - a.c) * (t - a.t)) / (b.t - a.t);
  };
  const [c0, c1] = [at(from), at(to)];
  return c0 === null || c1 === null ? null : ((c1 - c0) / (to - from)) * 100;
}

function promQuery(query: string): Promise<PromSample[]> {
  if (!prometheus) throw new Error('prometheus not started');
  return prometheus.query(query);
}

beforeAll(async () => {
  const metricsPort = await freePort();
  const worker = await start(
    process.execPath,
    [cli, 'worker', '--backend', 'local', '--state-dir', join(scratch, 'state'), '--metrics', `127.0.0.1:${metricsPort}`],
    { TEMPORAL_ADDRESS: temporalAddress(), TROUPE_TASK_QUEUE: queue, TROUPE_USAGE_INTERVAL_S: '1', NO_COLOR: '1' },
    /Metrics on http:\/\/127\.0\.0\.1:\d+\/metrics/,
  );
  metricsUrl = `http://127.0.0.1:${metricsPort}`;
  expect(worker.output()).toContain(`Metrics on ${metricsUrl}/metrics`);

  prometheus = await startPrometheus(scratch, [`127.0.0.1:${metricsPort}`]);

  const { client, close } = await testClient();
  closeClient = close;
  troupe = new TroupeClient(client, { taskQueue: queue });
  const yaml = [
    'type: task',
    `name: ${runName}`,
    'groups:',
    '  - name: prefill',
    '    commands:',
    // Holds 300 MiB (a filled bytes object is resident), keeps one core busy, and logs its own CPU
    // time twice a second: what the test checks Troupe's figure against on a busy machine.
    '      - |',
    "        python3 - <<'PY'",
    '        import time',
    `        b = b'x' * ${ALLOCATED}`,
    '        n = time.time()',
    '        while True:',
    '            if time.time() >= n:',
    '                print(f"t={time.time():.3f} c={time.process_time():.3f}", flush=True)',
    '                n += 0.5',
    '        PY',
    '  - name: decode',
    '    commands:',
    '      - sleep 600',
    '',
  ].join('\n');
  run = await troupe.submit({ yaml, options: { stop_grace_s: 1 } });
}, 180_000);

afterAll(async () => {
  await run?.stop().catch(() => undefined);
  if (run) await run.wait().catch(() => undefined);
  await closeClient();
  await prometheus?.stop();
  for (const child of children.reverse()) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => {
        const force = setTimeout(() => child.kill('SIGKILL'), 15_000);
        child.once('close', () => resolve(clearTimeout(force)));
      });
    }
  }
  rmSync(scratch, { recursive: true, force: true });
}, 120_000);

describe.skipIf(!prometheusInstalled())('worker metrics and troupe metrics on the local fleet', () => {
  it('troupe metrics RUN shows the job\'s memory and one busy core', async () => {
    const metrics = await until('a prefill sample with a CPU rate', async () => {
      const result = troupeCli(['metrics', runName, '--json']);
      const parsed = JSON.parse(result.stdout) as RunMetrics;
      const job = parsed.jobs.find((s) => s.job.group === 'prefill');
      const last = job?.points[job.points.length - 1];
      return last && last.cpu_percent !== null && last.memory_bytes > ALLOCATED ? parsed : null;
    });
    const prefill = metrics.jobs.find((s) => s.job.group === 'prefill');
    const last = prefill?.points[prefill.points.length - 1];
    expect(prefill?.job).toMatchObject({ run_name: runName, group: 'prefill', rank: 0, job_num: 0 });
    // The job's processes hold the bytes plus an interpreter and a shell: within 10 %.
    expect(last?.memory_bytes).toBeGreaterThanOrEqual(ALLOCATED);
    expect(last?.memory_bytes).toBeLessThanOrEqual(ALLOCATED * 1.1);
    expect(last?.memory_limit_bytes).toBeGreaterThan(ALLOCATED);
    // One core busy: 100 % on a quiet machine, less where other work shares the cores; what the job
    // measured of itself over the same interval is the truth to be within 10 % of.
    const [troupeRate, ownRate] = await until('an interval both Troupe and the job measured', async () => {
      const fresh = troupeCli(['metrics', runName, '--json', '--group', 'prefill']);
      const points = (JSON.parse(fresh.stdout) as RunMetrics).jobs[0]?.points.filter((p) => p.cpu_percent !== null) ?? [];
      if (points.length < 6) return null;
      const window = points.slice(-6);
      const from = window[0]!.at_ms;
      const to = window[window.length - 1]!.at_ms;
      let weighted = 0;
      for (let i = 1; i < window.length; i++) weighted += window[i]!.cpu_percent! * (window[i]!.at_ms - window[i - 1]!.at_ms);
      const own = ownCpuPercent((await run.readLog(0)).data, from / 1000, to / 1000);
      return own === null ? null : [weighted / (to - from), own];
    });
    expect(Math.abs(troupeRate - ownRate)).toBeLessThanOrEqual(Math.max(0.1 * ownRate, 2));
    if (process.env.TROUPE_TEST_TIMING) console.log(`CPU: Troupe ${troupeRate.toFixed(1)} %, the job itself ${ownRate.toFixed(1)} %`);
    expect(metrics.jobs.find((s) => s.job.group === 'decode')).toBeDefined();

    const table = troupeCli(['metrics', runName, '--group', 'prefill']);
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^ NAME\s+HOST\s+CPU\s+MEMORY\s+GPU\s+SAMPLED$/);
    expect(lines).toHaveLength(2);
    expect(lines[1]).toMatch(/^ prefill\/0\s+\S+\s+\d+%\s+3\d\dMiB\/[\d.]+GiB\s+-\s+(now|\d+s ago)$/);
  });

  it('serves Troupe\'s and the SDK\'s metrics at /metrics', async () => {
    const text = await (await fetch(`${metricsUrl}/metrics`)).text();
    expect(text).toMatch(/^troupe_launch_duration_seconds_count\{backend="local"\} 1$/m);
    expect(text).toMatch(/^troupe_jobs\{backend="local",state="running"\} 2$/m);
    expect(text).toMatch(/^troupe_job_events_total\{backend="local",event="started"\} 2$/m);
    expect(text).toMatch(new RegExp(`^troupe_job_memory_bytes\\{run="${runName}",group="prefill",rank="0"\\} \\d+`, 'm'));
    expect(text).toMatch(/^troupe_run_status_changes_total\{status="RUNNING"\} 1$/m);
    // Runs by status from visibility: this run at least (other files' runs share the dev server).
    expect(Number(/^troupe_runs\{status="RUNNING"\} (\d+)$/m.exec(text)?.[1])).toBeGreaterThanOrEqual(1);
    // The Temporal SDK's own, relayed from its exporter.
    expect(text).toMatch(/^temporal_\w+/m);
    expect(text).toContain('temporal_workflow_task_execution_latency_seconds');
  });

  it('the Grafana dashboard (deploy/) plots only metrics the endpoint serves', async () => {
    const text = await (await fetch(`${metricsUrl}/metrics`)).text();
    const served = new Set([...text.matchAll(/^(?:# TYPE )?([a-z_][a-z0-9_]*)/gm)].map((m) => m[1]));
    const dashboard = JSON.parse(readFileSync(join(projectRoot, 'deploy/grafana/troupe-dashboard.json'), 'utf8')) as { panels: Array<{ targets?: Array<{ expr: string }> }> };
    const named = new Set(dashboard.panels.flatMap((p) => p.targets ?? []).flatMap((t) => [...t.expr.matchAll(/\b((?:troupe|temporal)_[a-z0-9_]+)/g)].map((m) => m[1])));
    expect(named.size).toBeGreaterThan(15);
    expect([...named].filter((name) => !served.has(name)), `served: ${[...served].join(' ')}`).toEqual([]);
  });

  it('a real Prometheus scrapes it: launch latency, jobs by state, the job\'s memory within 10 %', async () => {
    const launches = await until('the launch histogram in Prometheus', async () => {
      const r = await promQuery('troupe_launch_duration_seconds_count{backend="local"}');
      return r.length > 0 ? r : null;
    });
    expect(Number(launches[0]?.value[1])).toBe(1);
    const p99 = await promQuery('histogram_quantile(0.99, troupe_launch_duration_seconds_bucket)');
    expect(Number(p99[0]?.value[1])).toBeGreaterThan(0);
    const jobs = await promQuery('troupe_jobs');
    expect(jobs.map((s) => [s.metric.backend, s.metric.state, s.value[1]])).toEqual([['local', 'running', '2']]);
    const memory = await until('the prefill memory gauge in Prometheus', async () => {
      const r = await promQuery(`troupe_job_memory_bytes{run="${runName}",group="prefill",rank="0"}`);
      return r.length > 0 ? r : null;
    });
    const bytes = Number(memory[0]?.value[1]);
    expect(Math.abs(bytes - ALLOCATED) / ALLOCATED).toBeLessThan(0.1);
    const sdk = await promQuery('temporal_workflow_completed_total or temporal_request_total');
    expect(sdk.length).toBeGreaterThan(0);
  });
});
