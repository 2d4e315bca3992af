import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { jobVisibleTempDir } from '../helpers/local-fleet';
import type { Instance, JobFiles, JobRef } from '../../src/backends/backend';
import type { LocalBackendOptions } from '../../src/backends/local/local-backend';
import { buildClusterInfo } from '../../src/runner/cluster-info';
import { renderJobFiles } from '../../src/runner/job-files';
import { alive, groupRequest, jobRef, LocalFleetHarness, makeRun, waitFor, type TestRun } from './local-fixtures';

/**
 * Worker processes that share the local fleet, and workers that die: a job outlives the worker that
 * started it, and a start retried after a worker's kill -9 never runs the commands twice.
 */

const h = new LocalFleetHarness();
const scratch = jobVisibleTempDir('troupe-local-workers-');
// The jobs write here, as their runs' own users (as root).
chmodSync(scratch, 0o1777);
const workers: ChildProcess[] = [];
afterAll(async () => {
  for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
  await h.cleanup();
  rmSync(scratch, { recursive: true, force: true });
});

const backendModule = fileURLToPath(new URL('../../src/backends/local/local-backend.ts', import.meta.url));
const script = join(scratch, 'worker.mts');
writeFileSync(
  script,
  `import { LocalBackend } from ${JSON.stringify(backendModule)};
const input = JSON.parse(process.argv[2]);
const backend = new LocalBackend(input.options);
if (input.action === 'provision') {
  const out = await Promise.all(input.requests.map((r) => backend.provision(r)));
  process.stdout.write(JSON.stringify(out) + '\\n');
} else {
  process.stdout.write('ready\\n');
  const { pid } = await backend.startJob(input.job, input.files);
  process.stdout.write(JSON.stringify({ pid }) + '\\n');
  setInterval(() => {}, 1000);
}
`,
);

/** A separate worker process running the local backend; resolves with each line it prints. */
function worker(input: unknown): { child: ChildProcess; lines: string[]; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ['--import', 'tsx', script, JSON.stringify(input)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  workers.push(child);
  const lines: string[] = [];
  let buffer = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    const parts = buffer.split('\n');
    buffer = parts.pop() ?? '';
    lines.push(...parts);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, lines, exited };
}

function filesFor(run: TestRun, instances: Instance[], num: number, jobDirectory: string): JobFiles {
  const ips = instances.map((i) => i.internal_ip);
  return renderJobFiles({
    run: { run_name: run.runName, nodes_num: run.jobs.length, env: run.env, image: null, working_dir: null },
    runUid: run.runId,
    job: run.jobs[num]!,
    cluster: buildClusterInfo(ips, instances.map((i) => i.gpus), num),
    addresses: [ips],
    jobDirectory,
  });
}

describe('local fleet shared by worker processes', () => {
  const options: LocalBackendOptions = { stateDir: h.stateDir, network: 'auto', subnet: '10.213.252.0/24' };

  it('gives the same instances to workers provisioning the same runs at once, and distinct addresses', async () => {
    const runs = [0, 1, 2, 3].map(() => makeRun([{ name: 'g', nodes: 2, commands: ['true'] }]));
    for (const run of runs) h.track(run);
    const requests = runs.map((run) => groupRequest(run, 0));
    const results = await Promise.all(
      [0, 1, 2].map(async () => {
        const w = worker({ action: 'provision', options, requests });
        expect(await w.exited).toBe(0);
        return JSON.parse(w.lines[0]!) as Instance[][];
      }),
    );
    for (const r of results) for (const instances of r) h.track(runs[0]!, instances);
    expect(results[1]).toEqual(results[0]);
    expect(results[2]).toEqual(results[0]);
    const ips = results[0]!.flat().map((i) => i.internal_ip);
    expect(new Set(ips).size).toBe(8);
  });

  it('keeps a job running after its worker is killed, and a retried start never runs it twice', async () => {
    const backend = h.backend(options);
    for (let attempt = 0; attempt < 4; attempt += 1) {
      const starts = join(scratch, `starts-${attempt}`);
      const run = makeRun([{ name: 'g', nodes: 1, commands: [`echo once >> ${starts}`, 'sleep 300'] }]);
      const instances = await h.provision(backend, run);
      const ref: JobRef = jobRef(run, 0, instances[0]!);
      const files = filesFor(run, instances, 0, backend.jobDirectory(ref));
      const w = worker({ action: 'start', options, job: ref, files });
      await waitFor('the worker to be ready', async () => w.lines.includes('ready'));
      // kill -9 somewhere in the middle of startJob (or right after it).
      await new Promise((r) => setTimeout(r, attempt * 15));
      w.child.kill('SIGKILL');
      await w.exited;
      // The retry, by another worker.
      const { pid } = await backend.startJob(ref, files);
      await waitFor('the commands to run', async () => existsSync(starts));
      expect(await backend.jobState(ref)).toEqual({ state: 'running', pid });
      expect(await alive(pid)).toBe(true);
      await new Promise((r) => setTimeout(r, 300));
      expect(readFileSync(starts, 'utf8')).toBe('once\n');
      await backend.stopJob(ref, 1);
      expect(await alive(pid)).toBe(false);
    }
  });
});
