/**
 * The demo: reuses or starts the embedded dev server (127.0.0.1:7233, Web UI on 8233, SQLite in
 * .troupe/dev-server) and a worker (pid in .troupe/worker.pid), then runs examples/pd-disagg-local.yml
 * with `troupe apply -y` and prints where to see the run in the Web UI. Both are left running so
 * the run can be inspected; `--stop` stops them by pid. `--service` serves the PD service instead
 * (scripts/demo-service.ts).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { NoWorkerError, TroupeClient } from '../src/client';
import { DevServerPortTaken, devServerOptionsFromEnv, pidAlive, projectRoot, startDevServer, stopDevServer, stopRecordedProcess } from '../src/devserver/dev-server';
import { startCodecSidecar, stopCodecSidecar } from '../src/devserver/codec-sidecar';
import { serviceDemo, serviceDemoPidFiles } from './demo-service';

const example = 'examples/pd-disagg-local.yml';
const stateDir = join(projectRoot, '.troupe');
const workerPidFile = join(stateDir, 'worker.pid');
const workerLog = join(stateDir, 'worker.log');
const server = devServerOptionsFromEnv();

function workerPid(): number | null {
  if (!existsSync(workerPidFile)) return null;
  const pid = Number(readFileSync(workerPidFile, 'utf8'));
  return Number.isInteger(pid) && pid > 0 && pidAlive(pid) ? pid : null;
}

async function stop(): Promise<void> {
  const pid = workerPid();
  if (pid !== null) {
    process.kill(pid, 'SIGTERM');
    for (let i = 0; i < 100 && pidAlive(pid); i++) await new Promise((r) => setTimeout(r, 100));
    console.log(`worker (pid ${pid}) stopped`);
  }
  rmSync(workerPidFile, { force: true });
  // What a service demo that was killed left.
  for (const file of serviceDemoPidFiles) {
    if (await stopRecordedProcess(file, 15_000)) console.log(`service demo's ${basename(file, '.pid')} stopped`);
  }
  if (await stopCodecSidecar(server)) console.log('codec server stopped');
  console.log((await stopDevServer(server)) ? 'dev server stopped' : 'no dev server of the demo was running');
}

async function ensureWorker(troupe: TroupeClient): Promise<void> {
  try {
    await troupe.checkWorkers('run the demo');
    return;
  } catch (err) {
    if (!(err instanceof NoWorkerError)) throw err;
  }
  mkdirSync(stateDir, { recursive: true });
  const log = openSync(workerLog, 'a');
  const child = spawn(process.execPath, [join(projectRoot, 'bin', 'troupe.js'), 'worker'], {
    cwd: projectRoot,
    detached: true,
    stdio: ['ignore', log, log],
    env: { ...process.env, TEMPORAL_ADDRESS: `127.0.0.1:${server.port}` },
  });
  if (child.pid === undefined) throw new Error('could not start a worker');
  child.unref();
  writeFileSync(workerPidFile, `${child.pid}\n`);
  console.log(`started a worker (pid ${child.pid}, log ${workerLog})`);
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      await troupe.checkWorkers('run the demo');
      return;
    } catch (err) {
      if (!(err instanceof NoWorkerError)) throw err;
      if (!pidAlive(child.pid)) throw new Error(`the worker exited; see ${workerLog}`);
      if (Date.now() > deadline) throw new Error(`the worker did not poll within 120 s; see ${workerLog}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

async function main(): Promise<number> {
  if (process.argv.includes('--stop')) {
    await stop();
    return 0;
  }
  if (process.argv.includes('--service')) return await serviceDemo(server);
  const handle = await startDevServer(server);
  console.log(`Temporal dev server at ${handle.address} (${handle.reused ? 'already running, ' : ''}pid ${handle.pid}); Web UI ${handle.uiAddress}`);
  // The Web UI decodes inputs and results through it: without it every field is an encrypted blob.
  const codec = await startCodecSidecar(server);
  if (codec) console.log(`codec server for the Web UI at ${codec.endpoint}`);
  const troupe = await TroupeClient.connect({ address: handle.address });
  try {
    await ensureWorker(troupe);
  } finally {
    await troupe.close();
  }
  const apply = spawn(process.execPath, [join(projectRoot, 'bin', 'troupe.js'), 'apply', '-f', example, '-y'], {
    cwd: projectRoot,
    stdio: 'inherit',
    env: { ...process.env, TEMPORAL_ADDRESS: handle.address, TEMPORAL_UI_ADDRESS: handle.uiAddress },
  });
  const code = await new Promise<number>((resolve) => apply.once('exit', (c) => resolve(c ?? 1)));
  console.log('');
  console.log(`See the run in the Web UI: ${handle.uiAddress}/namespaces/default/workflows/${encodeURIComponent('run/pd-disagg-local')}`);
  console.log('The dev server and the worker keep running for that; stop them with: npm run demo -- --stop');
  return code;
}

try {
  process.exitCode = await main();
} catch (err) {
  // The port held by something else is the user's to sort out: one line, not a stack trace.
  if (!(err instanceof DevServerPortTaken)) throw err;
  console.error(err.message);
  process.exitCode = 1;
}
