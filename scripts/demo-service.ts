/**
 * `npm run demo -- --service`: examples/services/pd-service-local.yml served on the embedded default.
 * Beside the dev server (reused, or started) it starts a gateway (data plane and admin API on
 * 127.0.0.1, ports the system picks; an admin token made here, mode 0600) and a worker that pushes to
 * it, on a task queue of its own (a worker of `npm run demo`, which has no gateway, never takes its
 * activities). It applies the service, waits until a chat completion goes through the gateway, prints
 * the endpoint, the token and a curl line, runs that curl once — then stops the service and all it
 * started, as the task demo ends with its task. Ctrl-C at any point stops the same things.
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isFinished, NoWorkerError, TroupeClient, type RunState } from '../src/client';
import { startCodecSidecar, sidecarPort, stopCodecSidecar } from '../src/devserver/codec-sidecar';
import { pidAlive, portIsOpen, projectRoot, runningDevServer, startDevServer, stopDevServer, stopRecordedProcess, type DevServerOptions } from '../src/devserver/dev-server';

const example = 'examples/services/pd-service-local.yml';
const runName = 'pd-service-local';
const standIn = join(projectRoot, 'examples', 'services', 'stand-in-model.py');
/**
 * Where the replicas read the stand-in: a local node has a /tmp of its own and may not see the
 * checkout (a clone under /tmp), but it sees /var/tmp. A copy, root's, readable by the run's user.
 */
export const standInCopy = '/var/tmp/troupe-demo-service/stand-in-model.py';

function copyStandIn(): string {
  mkdirSync(join(standInCopy, '..'), { recursive: true, mode: 0o755 });
  chmodSync(join(standInCopy, '..'), 0o755);
  copyFileSync(standIn, standInCopy);
  chmodSync(standInCopy, 0o644);
  return standInCopy;
}
/** Its own task queue: a worker without a gateway would fail the service's pushes. */
const taskQueue = 'troupe-demo-service';
export const serviceDemoDir = join(projectRoot, '.troupe', 'demo-service');
const adminTokenFile = join(serviceDemoDir, 'gateway-admin.token');
/** Pid files, so `npm run demo -- --stop` finds what a demo that was killed left. */
export const serviceDemoPidFiles = ['worker.pid', 'gateway.pid'].map((f) => join(serviceDemoDir, f));
const bin = join(projectRoot, 'bin', 'troupe.js');
const PROMPT = 'Hello';

class Interrupted extends Error {}

async function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) throw new Interrupted();
  await new Promise((r) => setTimeout(r, ms));
  if (signal.aborted) throw new Interrupted();
}

/** A troupe command of its own process group, so the terminal's Ctrl-C reaches the demo alone, which stops it in its turn. */
function startTroupe(what: 'gateway' | 'worker', args: string[], env: NodeJS.ProcessEnv): { pid: number; log: string } {
  const log = join(serviceDemoDir, `${what}.log`);
  const fd = openSync(log, 'w');
  const child = spawn(process.execPath, [bin, ...args], { cwd: projectRoot, detached: true, stdio: ['ignore', fd, fd], env: { ...process.env, ...env } });
  if (child.pid === undefined) throw new Error(`could not start a ${what}`);
  child.unref();
  writeFileSync(join(serviceDemoDir, `${what}.pid`), `${child.pid}\n`);
  return { pid: child.pid, log };
}

/** The gateway's own start line: where its data plane and admin API listen. */
async function gatewayAddresses(pid: number, log: string, signal: AbortSignal): Promise<{ publicUrl: string; adminUrl: string }> {
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await sleep(100, signal)) {
    const text = readFileSync(log, 'utf8');
    const match = /shown to users as (\S+) .*admin API on (\S+);/.exec(text);
    if (match) return { publicUrl: match[1] as string, adminUrl: match[2] as string };
    if (!pidAlive(pid)) throw new Error(`the gateway exited: ${text.trim()}`);
  }
  throw new Error(`the gateway did not listen within 30 s; see ${log}`);
}

async function waitForWorker(troupe: TroupeClient, pid: number, log: string, signal: AbortSignal): Promise<void> {
  for (const deadline = Date.now() + 120_000; ; await sleep(250, signal)) {
    try {
      return await troupe.checkWorkers('run the service demo', 'local');
    } catch (err) {
      if (!(err instanceof NoWorkerError)) throw err;
      if (!pidAlive(pid)) throw new Error(`the worker exited; see ${log}`);
      if (Date.now() > deadline) throw new Error(`the worker did not poll within 120 s; see ${log}`);
    }
  }
}

/** `troupe apply -f … -y -d` as a user types it; its output shown as it comes, the token it prints once kept. */
async function apply(env: NodeJS.ProcessEnv): Promise<string> {
  const child = spawn(process.execPath, [bin, 'apply', '-f', example, '-y', '-d'], { cwd: projectRoot, stdio: ['ignore', 'inherit', 'pipe'], env: { ...process.env, ...env } });
  let err = '';
  child.stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
    process.stderr.write(chunk);
  });
  const code = await new Promise<number>((resolve) => child.once('exit', (c) => resolve(c ?? 1)));
  if (code !== 0) throw new Error(`troupe apply exited with ${code}`);
  // Printed once as `  export TOKEN=…` (src/cli/commands/apply.ts).
  const token = /^ {2}export TOKEN=(\S+)$/m.exec(err)?.[1];
  if (token === undefined) throw new Error("troupe apply did not print the service's token");
  return token;
}

function chatBody(content: string): string {
  return JSON.stringify({ model: 'stand-in-llama', messages: [{ role: 'user', content }] });
}

/** Until a chat completion goes through the gateway, router → prefill → decode; the run's own progress shown meanwhile. */
async function waitUntilServing(troupe: TroupeClient, token: string, signal: AbortSignal): Promise<string> {
  const run = troupe.run(runName);
  let shown = '';
  for (const deadline = Date.now() + 180_000; ; await sleep(500, signal)) {
    const state: RunState = await run.state();
    if (isFinished(state.status)) throw new Error(`the service ended: ${state.status}${state.message ? ` (${state.message})` : ''}`);
    const ready = state.jobs.filter((j) => j.status === 'READY').length;
    const line = `${runName}: ${state.status}, ${ready}/${state.jobs.length} replicas READY`;
    if (line !== shown) console.log((shown = line));
    const endpoint = state.service?.endpoints[0];
    if (endpoint !== undefined && ready === state.jobs.length) {
      const res = await fetch(`${endpoint}v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: chatBody('ping'),
        signal: AbortSignal.timeout(10_000),
      }).catch(() => null);
      if (res?.status === 200) return endpoint;
    }
    if (Date.now() > deadline) throw new Error(`the service did not serve within 180 s (${line}); see ${serviceDemoDir}/worker.log`);
  }
}

/** The line printed for the user to copy; the demo runs the same arguments. */
function curlArgs(endpoint: string, token: string): string[] {
  return ['-sS', `${endpoint}v1/chat/completions`, '-H', `Authorization: Bearer ${token}`, '-H', 'Content-Type: application/json', '-d', chatBody(PROMPT)];
}

function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`;
}

async function stopService(troupe: TroupeClient): Promise<void> {
  const run = troupe.run(runName);
  if (!(await run.stop().catch(() => false))) return;
  console.log(`stopping ${runName}…`);
  let timer: NodeJS.Timeout | undefined;
  const final = await Promise.race([run.wait(), new Promise<null>((r) => (timer = setTimeout(() => r(null), 120_000)))]);
  clearTimeout(timer);
  console.log(final ? `${runName}: ${final.status}${final.termination_reason ? ` (${final.termination_reason})` : ''}` : `${runName} did not end within 120 s: see troupe ps`);
}

export async function serviceDemo(server: DevServerOptions): Promise<number> {
  const interrupt = new AbortController();
  const { signal } = interrupt;
  const onSigint = () => {
    if (signal.aborted) {
      console.error('Interrupted again: leaving now. `npm run demo -- --stop` stops what is left.');
      process.exit(130);
    }
    console.error('\nInterrupted: stopping the service and what the demo started (Ctrl-C again to leave at once)…');
    interrupt.abort();
  };
  process.on('SIGINT', onSigint);
  process.on('SIGTERM', onSigint);

  const codecPort = sidecarPort(server);
  // What runs already (an earlier `npm run demo`'s, say) is left running at the end.
  const codecWasUp = codecPort !== null && (await portIsOpen(codecPort));
  const serverWasUp = runningDevServer(server) !== null || (await portIsOpen(server.port));
  const handle = await startDevServer(server);
  console.log(`Temporal dev server at ${handle.address} (${handle.reused ? 'already running, ' : ''}pid ${handle.pid}); Web UI ${handle.uiAddress}`);
  const codec = await startCodecSidecar(server);
  const env = { TEMPORAL_ADDRESS: handle.address, TEMPORAL_UI_ADDRESS: handle.uiAddress, TROUPE_TASK_QUEUE: taskQueue };
  const troupe = await TroupeClient.connect({ address: handle.address, taskQueue });
  const started: Array<{ what: string; pid: number; file: string }> = [];
  let applied = false;
  try {
    mkdirSync(serviceDemoDir, { recursive: true, mode: 0o700 });
    rmSync(adminTokenFile, { force: true });
    writeFileSync(adminTokenFile, `${randomBytes(24).toString('hex')}\n`, { mode: 0o600 });

    const gateway = startTroupe('gateway', ['gateway', '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--admin-token-file', adminTokenFile], {});
    started.push({ what: 'gateway', pid: gateway.pid, file: serviceDemoPidFiles[1] as string });
    const { publicUrl, adminUrl } = await gatewayAddresses(gateway.pid, gateway.log, signal);
    console.log(`started a gateway (pid ${gateway.pid}): data plane ${publicUrl}, admin API ${adminUrl} (token in ${adminTokenFile}, log ${gateway.log})`);

    const worker = startTroupe('worker', ['worker', '--gateway', adminUrl, '--gateway-token-file', adminTokenFile], env);
    started.push({ what: 'worker', pid: worker.pid, file: serviceDemoPidFiles[0] as string });
    console.log(`started a worker (pid ${worker.pid}, task queue ${taskQueue}, log ${worker.log})`);
    await waitForWorker(troupe, worker.pid, worker.log, signal);

    if (signal.aborted) throw new Interrupted();
    applied = true;
    const token = await apply({ ...env, STAND_IN_MODEL: copyStandIn() });
    const endpoint = await waitUntilServing(troupe, token, signal);

    const args = curlArgs(endpoint, token);
    console.log('');
    console.log(`${runName} serves at ${endpoint}`);
    console.log(`token: ${token}`);
    console.log('call it:');
    console.log(`  curl ${args.map(shellWord).join(' ')}`);
    const curl = spawnSync('curl', args, { encoding: 'utf8', timeout: 30_000 });
    if (curl.error) throw new Error(`curl: ${curl.error.message}`);
    console.log(curl.stdout.trim());
    const answer = JSON.parse(curl.stdout) as { choices?: Array<{ message?: { content?: string } }> };
    console.log(`answer: ${answer.choices?.[0]?.message?.content ?? '(none)'}`);
    console.log('');
    return curl.status === 0 ? 0 : 1;
  } catch (err) {
    if (!(err instanceof Interrupted)) throw err;
    return 130;
  } finally {
    if (applied) await stopService(troupe);
    await troupe.close();
    for (const { what, pid, file } of started.reverse()) {
      await stopRecordedProcess(file, 15_000);
      console.log(`${what} (pid ${pid}) stopped`);
    }
    if (codec && !codecWasUp && (await stopCodecSidecar(server))) console.log('codec server stopped');
    if (!serverWasUp && (await stopDevServer(server))) console.log('dev server stopped');
    process.off('SIGINT', onSigint);
    process.off('SIGTERM', onSigint);
  }
}
