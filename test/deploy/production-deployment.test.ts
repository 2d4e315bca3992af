import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect as tlsConnect } from 'node:tls';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { isGrpcServiceError } from '@temporalio/client';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileNow } from '../helpers/live-dir';
import { TroupeClient, type Plan, type RunState } from '../../src/client';
import { deleteServiceTable, gatewayInfo, putServiceTable, type GatewayAdmin } from '../../src/gateway/admin-client';
import { loadPlan } from '../../src/plan/load-plan';
import { leftovers } from '../helpers/leftovers';
import { makeSharedDir } from '../helpers/local-fleet';
import { uniqueTaskQueue } from '../helpers/temporal';
import { kill9 } from '../helpers/worker-process-control';

/**
 * The production path, for real: scripts/deploy-local.sh brings up PostgreSQL and the Temporal
 * server at the release docker-compose.yml pins (frontend, history, matching and worker services,
 * each its own process, from deploy/temporal/config/troupe.yaml and deploy/temporal/dynamicconfig.yaml)
 * with mTLS on the frontend and between the services, Troupe's authorizer (deploy/temporal-server: the
 * client certificate's CN is its role), and a service gateway; two `troupe worker` processes serve it
 * with the worker certificate, a user's client submits, reads and stops runs with the user certificate
 * (and with a user's token, in the namespace it names only),
 * and runs go on while each part fails in turn.
 */

const run = promisify(execFile);
const repo = fileURLToPath(new URL('../..', import.meta.url));
const deployScript = join(repo, 'scripts', 'deploy-local.sh');
const cli = join(repo, 'bin', 'troupe.js');
const pdSample = join(repo, 'examples', 'pd-disagg-local.yml');
// mkdtemp makes it 0700, so PostgreSQL's data goes to a temp dir of its own: the script's other path.
const deployDir = mkdtempSync(join(tmpdir(), 'troupe-deploy-test-'));
// Both workers serve the same local fleet (this machine), as two workers on one host do.
const workerState = mkdtempSync(join(tmpdir(), 'troupe-deploy-worker-'));
const fleetDir = join(workerState, 'local');
const shared = makeSharedDir('troupe-deploy-shared-');
const taskQueue = uniqueTaskQueue('deploy');
const deployEnv = { ...process.env, TROUPE_DEPLOY_DIR: deployDir };

let address = '';
const tlsDir = join(deployDir, 'tls');
// What `up` prints for a role's clients: the temporal CLI's variable names, which Troupe reads.
const tlsEnvOf = (role: 'worker' | 'user') => ({
  TEMPORAL_TLS_SERVER_CA_CERT_PATH: join(tlsDir, 'ca.pem'),
  TEMPORAL_TLS_CLIENT_CERT_PATH: join(tlsDir, `${role}.pem`),
  TEMPORAL_TLS_CLIENT_KEY_PATH: join(tlsDir, `${role}.key`),
  TEMPORAL_TLS_SERVER_NAME: 'localhost',
});
const workerTlsEnv = tlsEnvOf('worker');
const tlsEnv = tlsEnvOf('user');
const workers: ChildProcess[] = [];
let troupe: TroupeClient | undefined;

function deploy(args: string[], timeoutMs: number) {
  return run('bash', [deployScript, ...args], { env: deployEnv, timeout: timeoutMs, maxBuffer: 16 << 20 });
}

function ports(): Record<string, string> {
  const text = readFileSync(join(deployDir, 'ports.env'), 'utf8');
  return Object.fromEntries(text.split('\n').filter(Boolean).map((line) => line.split('=') as [string, string]));
}

const servicePid = (service: string) => Number(readFileSync(join(deployDir, `${service}.pid`), 'utf8').trim());
const cliEnv = () => ({ ...process.env, ...tlsEnv, TEMPORAL_ADDRESS: address, TROUPE_TASK_QUEUE: taskQueue, NO_COLOR: '1' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function startWorker(): Promise<ChildProcess> {
  const child = spawn(process.execPath, [cli, 'worker', '--state-dir', workerState], {
    env: { ...process.env, ...workerTlsEnv, TEMPORAL_ADDRESS: address, TROUPE_TASK_QUEUE: taskQueue },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  await new Promise<void>((resolve, reject) => {
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (stderr.includes('Troupe worker on')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`troupe worker exited early (${code}): ${stderr}`)));
  });
  workers.push(child);
  return child;
}

/** The PD sample, each job first appending its rank to a file: how many times each job started. */
function pdPlan(runName: string, warmupSeconds: number): Plan {
  const text = readFileSync(pdSample, 'utf8').replace('WARMUP_SECONDS=3', `WARMUP_SECONDS=${warmupSeconds}`);
  const plan = loadPlan(text, pdSample, { environ: process.env, runName });
  const mark = `echo "$DSTACK_NODE_RANK" >> ${shared.dir}/${runName}`;
  for (const group of plan.groups) group.commands = [mark, ...group.commands];
  for (const job of plan.jobs) job.commands = [mark, ...job.commands];
  return plan;
}

/** Waits for the run's end, riding out the moments a restarting service refuses a call. */
async function waitEnd(name: string, timeoutMs = 240_000): Promise<RunState> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await troupe!.run(name).wait();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(1000);
    }
  }
}

async function eventually<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await sleep(500);
  }
}

/** A process that ended: gone, or a zombie (empty command line) that nobody has reaped yet. */
function ended(pid: number): boolean {
  const file = `/proc/${pid}/cmdline`;
  return !existsSync(file) || readFileSync(file).length === 0;
}

async function killService(service: string): Promise<void> {
  const pid = servicePid(service);
  process.kill(pid, 'SIGKILL');
  await eventually(`the ${service} service gone`, async () => (ended(pid) ? true : undefined));
  await sleep(2000);
  await deploy(['up'], 180_000);
  expect(servicePid(service)).not.toBe(pid);
}

/** A PD run that goes through `fault` mid-run: DONE, each of its three jobs started once, nothing left. */
async function survives(label: string, fault: () => Promise<void>): Promise<void> {
  const name = `pd-${label}-${taskQueue.slice(-8)}`;
  // Long warm-up: the workers are up and the router waits for them through the fault.
  await troupe!.submit({ plan: pdPlan(name, 12) });
  await eventually('the first job started', async () => (shared.lines(name).length > 0 ? true : undefined), 60_000);
  await fault();
  const state = await waitEnd(name);
  expect(state.status, state.message ?? '').toBe('DONE');
  expect(shared.lines(name).sort()).toEqual(['0', '1', '2']);
  expect(leftovers(state, fleetDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
}

beforeAll(async () => {
  const started = Date.now();
  // scripts/setup.sh --test has built the server; on a machine where it has not, this builds it.
  const { stdout } = await deploy(['up'], 14 * 60_000);
  address = `127.0.0.1:${ports().FRONTEND_PORT}`;
  const envLine = (env: Record<string, string>) => Object.entries(env).map(([k, v]) => `${k}=${v}`).join(' ');
  expect(stdout).toContain(`Temporal frontend: ${address}  (mTLS; the certificate is the role)`);
  expect(stdout).toContain(`Users (troupe and temporal CLIs, SDK): export TEMPORAL_ADDRESS=${address} ${envLine(tlsEnv)}\n`);
  expect(stdout).toContain(`Workers: TEMPORAL_ADDRESS=${address} ${envLine(workerTlsEnv)} troupe worker --gateway http://127.0.0.1:${ports().GATEWAY_ADMIN_PORT} --gateway-token-file `);
  expect(stdout).toContain(`Service gateway: http://127.0.0.1:${ports().GATEWAY_PORT}`);
  expect(stdout).toMatch(/^Users' tokens \(a user in the namespaces named only\): TEMPORAL_API_KEY=\$\(TROUPE_DEPLOY_DIR=\S+ \S+\/deploy\/make-token\.sh --namespace default --sub NAME --ttl 12h\)$/m);
  if (process.env.TROUPE_TEST_TIMING) console.log(`deploy-local up: ${Date.now() - started} ms`);
  await Promise.all([startWorker(), startWorker()]);
  // The tests' own client is a user's: what it does, a user may.
  troupe = await connectAs(tlsEnv.TEMPORAL_TLS_CLIENT_CERT_PATH, tlsEnv.TEMPORAL_TLS_CLIENT_KEY_PATH);
}, 15 * 60_000);

function connectAs(cert: string, key: string): Promise<TroupeClient> {
  return TroupeClient.connect({
    address,
    taskQueue,
    tls: {
      serverRootCACertificate: readFileSync(tlsEnv.TEMPORAL_TLS_SERVER_CA_CERT_PATH),
      clientCertPair: { crt: readFileSync(cert), key: readFileSync(key) },
      serverNameOverride: 'localhost',
    },
  });
}

/** The refusal's message when the frontend answers PermissionDenied (in the error or its cause), else what happened. */
async function refusalOf(call: () => Promise<unknown>): Promise<string> {
  try {
    await call();
    return 'allowed';
  } catch (err) {
    for (let e: unknown = err; e; e = (e as { cause?: unknown }).cause) {
      if (isGrpcServiceError(e)) return e.code === status.PERMISSION_DENIED ? `denied: ${e.details}` : `code ${e.code}: ${e.details}`;
    }
    return `other: ${(err as Error).name}: ${(err as Error).message}`;
  }
}

/** `troupe ps` against the deployment with these settings: its exit code and what it printed. */
async function ps(env: Record<string, string>): Promise<{ code: number; out: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TEMPORAL_TLS')));
  return run(process.execPath, [cli, 'ps'], { env: { ...base, ...env, TEMPORAL_ADDRESS: address, NO_COLOR: '1' }, timeout: 60_000 }).then(
    ({ stdout, stderr }) => ({ code: 0, out: stdout + stderr }),
    (err: { code: number; stdout: string; stderr: string }) => ({ code: err.code, out: err.stdout + err.stderr }),
  );
}

/** One TLS handshake with the CA and no client certificate, then what the server says: its alert, or nothing. */
function handshakeWithoutCertificate(port: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = tlsConnect({ host: '127.0.0.1', port: Number(port), servername: 'localhost', ca: readFileSync(tlsEnv.TEMPORAL_TLS_SERVER_CA_CERT_PATH), ALPNProtocols: ['h2'] });
    const timer = setTimeout(() => done('no alert'), 3000);
    const done = (what: string) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(what);
    };
    socket.once('error', (err: NodeJS.ErrnoException) => done(err.code ?? err.message));
  });
}

afterAll(async () => {
  await troupe?.close().catch(() => undefined);
  for (const worker of workers) await kill9(worker);
  const pgdataFile = join(deployDir, 'pgdata.path');
  const pgdata = existsSync(pgdataFile) ? readFileSync(pgdataFile, 'utf8').trim() : null;
  try {
    await deploy(['down'], 120_000);
  } finally {
    if (pgdata?.startsWith(tmpdir())) rmSync(pgdata, { recursive: true, force: true });
    rmSync(deployDir, { recursive: true, force: true });
    rmSync(workerState, { recursive: true, force: true });
    shared.remove();
  }
}, 180_000);

describe('the production deployment from bare processes (Temporal 1.29.1 on PostgreSQL)', () => {
  it('makes its CA and certificates once, keys 0600 in a 0700 folder, and `up` again keeps them', async () => {
    expect(statSync(tlsDir).mode & 0o777).toBe(0o700);
    for (const key of ['ca.key', 'server.key', 'worker.key', 'user.key', 'token.key']) expect(statSync(join(tlsDir, key)).mode & 0o777, key).toBe(0o600);
    const before = readFileSync(join(tlsDir, 'user.pem'), 'utf8');
    await deploy(['up'], 180_000);
    expect(readFileSync(join(tlsDir, 'user.pem'), 'utf8')).toBe(before);
    const subject = async (name: string) => (await run('openssl', ['x509', '-in', join(tlsDir, `${name}.pem`), '-noout', '-subject'])).stdout.trim();
    expect([await subject('server'), await subject('worker'), await subject('user')]).toEqual(['subject=CN = troupe-server', 'subject=CN = troupe-worker', 'subject=CN = troupe-user']);
  });

  it('refuses clients without the deployment\'s client certificate, at the frontend and between the services', async () => {
    const advice = /give the deployment's CA and a client certificate: --tls-ca, --tls-cert, --tls-key/;
    // No TLS at all, the CA but no certificate, and a certificate of another CA: each one line, exit 1.
    const plain = await ps({});
    expect(plain).toMatchObject({ code: 1 });
    expect(plain.out).toMatch(new RegExp(`^cannot reach the Temporal service at ${address}: it speaks TLS and this client connected without; ${advice.source}`));
    const noCert = await ps({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: tlsEnv.TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_SERVER_NAME: 'localhost' });
    expect(noCert).toMatchObject({ code: 1 });
    expect(noCert.out).toMatch(/: it requires a client certificate and this client showed none; /);
    const other = mkdtempSync(join(tmpdir(), 'troupe-other-ca-'));
    try {
      await run('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=stranger', '-days', '2',
        '-keyout', join(other, 'key.pem'), '-out', join(other, 'cert.pem')]);
      const stranger = await ps({ ...tlsEnv, TEMPORAL_TLS_CLIENT_CERT_PATH: join(other, 'cert.pem'), TEMPORAL_TLS_CLIENT_KEY_PATH: join(other, 'key.pem') });
      expect(stranger).toMatchObject({ code: 1 });
      expect(stranger.out).toMatch(/: it refused the client certificate \(not signed by a CA it trusts\); /);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
    // A missing file: named with its variable, bad usage, before any connection.
    const missing = await ps({ ...tlsEnv, TEMPORAL_TLS_CLIENT_CERT_PATH: join(tlsDir, 'nope.pem') });
    expect(missing).toEqual({ code: 2, out: `TEMPORAL_TLS_CLIENT_CERT_PATH ${join(tlsDir, 'nope.pem')}: no such file\n` });
    // The SDK without TLS, and the temporal CLI without a certificate, are refused too; with it, served.
    await expect(TroupeClient.connect({ address, taskQueue, connectTimeout: '3s' })).rejects.toThrow();
    const temporal = join(repo, '.venv', 'bin', 'temporal');
    const health = ['operator', 'cluster', 'health', '--address', address, '--tls-ca-path', tlsEnv.TEMPORAL_TLS_SERVER_CA_CERT_PATH, '--tls-server-name', 'localhost'];
    await expect(run(temporal, [...health, '--command-timeout', '5s'])).rejects.toThrow();
    const { stdout } = await run(temporal, [...health, '--tls-cert-path', tlsEnv.TEMPORAL_TLS_CLIENT_CERT_PATH, '--tls-key-path', tlsEnv.TEMPORAL_TLS_CLIENT_KEY_PATH]);
    expect(stdout).toMatch(/SERVING/);
    // The frontend's HTTP API too; and internode: history and matching ask every caller for a certificate of the CA.
    const { HTTP_PORT, HISTORY_PORT, MATCHING_PORT } = ports();
    expect(await handshakeWithoutCertificate(HTTP_PORT!)).toBe('ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED');
    expect(await handshakeWithoutCertificate(HISTORY_PORT!)).toBe('ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED');
    expect(await handshakeWithoutCertificate(MATCHING_PORT!)).toBe('ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED');
  });

  it('draws the line between users and workers: a user certificate may not poll, start fleet or group workflows, send a fleet Update or a run\'s internal signal; nor may a stranger CN', async () => {
    const user = troupe!.temporal;
    const namespace = user.options.namespace;
    const fleetId = `fleet/authz-${taskQueue.slice(-8)}`;
    const runId = `run/authz-${taskQueue.slice(-8)}`;
    const poll = (client: typeof user) => client.workflowService.pollWorkflowTaskQueue({ namespace, taskQueue: { name: taskQueue }, identity: 'authz-test' });
    expect(await refusalOf(() => poll(user))).toMatch(/^denied: troupe: PollWorkflowTaskQueue: polling task queues and answering their tasks is a worker's; only workers may \(the worker certificate, CN troupe-worker\)$/);
    expect(await refusalOf(() => user.workflowService.pollActivityTaskQueue({ namespace, taskQueue: { name: taskQueue }, identity: 'authz-test' }))).toMatch(/^denied: .*polling task queues/);
    expect(await refusalOf(() => user.workflow.start('FleetWorkflow', { taskQueue, workflowId: fleetId, args: [] }))).toMatch(
      /^denied: troupe: a user may start RunWorkflow \(id run\/<name>\) and ReadJobLogWorkflow \(id run\/<name>\/log\/\.\.\.\), not FleetWorkflow with id "fleet\//,
    );
    expect(await refusalOf(() => user.workflow.start('NodeGroupWorkflow', { taskQueue, workflowId: `${runId}/group/a`, args: [] }))).toMatch(/^denied: .*not NodeGroupWorkflow/);
    // A fleet's Update and a run's internal signal: refused by name before the workflow is looked up;
    // the worker's certificate gets as far as "not found", the user's stopRun too.
    const worker = await connectAs(workerTlsEnv.TEMPORAL_TLS_CLIENT_CERT_PATH, workerTlsEnv.TEMPORAL_TLS_CLIENT_KEY_PATH);
    try {
      const allocate = (client: typeof user) => client.workflow.getHandle(fleetId).executeUpdate('allocateHosts', { args: [{}] });
      expect(await refusalOf(() => allocate(user))).toMatch(/^denied: troupe: a user may send a run \(run\/<name>\) the Updates scaleGroup and applyService only, not allocateHosts to "fleet\/[^"]+": a fleet's Updates take and give back machines; only workers may/);
      expect(await refusalOf(() => allocate(worker.temporal))).not.toMatch(/^denied/);
      const jobEvents = (client: typeof user) => client.workflow.getHandle(runId).signal('jobEvents', { submission: 0, events: [] });
      expect(await refusalOf(() => jobEvents(user))).toMatch(/^denied: troupe: a user may send a run \(run\/<name>\) the signal stopRun only, not jobEvents to "run\/[^"]+": a run's internal signals pass between its workflows/);
      expect(await refusalOf(() => jobEvents(worker.temporal))).not.toMatch(/^denied/);
      expect(await refusalOf(() => user.workflow.getHandle(`${runId}/group/a`).signal('unlockGroup'))).toMatch(/^denied: .*not unlockGroup/);
      expect(await refusalOf(() => user.workflow.getHandle(runId).signal('stopRun', { abort: false }))).not.toMatch(/^denied/);
      // What only the operator does (the services' certificate): not a worker's, not a user's.
      const addAttribute = (client: typeof user) => client.connection.operatorService.addSearchAttributes({ namespace, searchAttributes: { AuthzTest: 1 } });
      expect(await refusalOf(() => addAttribute(worker.temporal))).toMatch(/^denied: troupe: AddSearchAttributes is for the deployment's operators/);
      expect(await refusalOf(() => addAttribute(user))).toMatch(/^denied: troupe: a user may not call AddSearchAttributes/);
    } finally {
      await worker.close();
    }
    // A certificate of the deployment's CA whose CN names no role: connected, and refused with why.
    const other = mkdtempSync(join(tmpdir(), 'troupe-stranger-cn-'));
    try {
      await run('openssl', ['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=troupe-client', '-keyout', join(other, 'key.pem'), '-out', join(other, 'req.pem')]);
      await run('openssl', ['x509', '-req', '-in', join(other, 'req.pem'), '-CA', join(tlsDir, 'ca.pem'), '-CAkey', join(tlsDir, 'ca.key'), '-CAcreateserial', '-CAserial', join(other, 'ca.srl'), '-days', '2', '-out', join(other, 'cert.pem')]);
      const stranger = await connectAs(join(other, 'cert.pem'), join(other, 'key.pem'));
      try {
        expect(await refusalOf(() => stranger.temporal.workflowService.listWorkflowExecutions({ namespace }))).toMatch(
          /^denied: troupe: the client certificate's subject CN="troupe-client" has no role in this deployment \(troupe-worker for workers, troupe-user or troupe-user-<name> for users\)$/,
        );
        // troupe ps prints the authorizer's reason, not the SDK's "Failed to list workflows": exit 4.
        const refused = await ps({ ...tlsEnv, TEMPORAL_TLS_CLIENT_CERT_PATH: join(other, 'cert.pem'), TEMPORAL_TLS_CLIENT_KEY_PATH: join(other, 'key.pem') });
        expect(refused.code).toBe(4);
        expect(refused.out).toMatch(/^the Temporal service refused this client \(PERMISSION_DENIED\): troupe: the client certificate's subject CN="troupe-client" has no role in this deployment /);
        // With a user's token it is a user in the token's namespace: how a team's rights alone are handed out.
        const token = (await run('bash', [join(repo, 'deploy', 'make-token.sh'), '--namespace', namespace, '--sub', 'team-member', '--ttl', '10m'], { env: deployEnv })).stdout.trim();
        const member = await ps({ ...tlsEnv, TEMPORAL_TLS_CLIENT_CERT_PATH: join(other, 'cert.pem'), TEMPORAL_TLS_CLIENT_KEY_PATH: join(other, 'key.pem'), TEMPORAL_API_KEY: token });
        expect(member).toMatchObject({ code: 0 });
      } finally {
        await stranger.close();
      }
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });

  it("a user's token (deploy/make-token.sh, the key made at deploy) makes a user in the namespaces it names only, never a worker", async () => {
    expect(statSync(join(tlsDir, 'token.key')).mode & 0o777).toBe(0o600);
    const mint = async (...args: string[]) => (await run('bash', [join(repo, 'deploy', 'make-token.sh'), ...args], { env: deployEnv })).stdout.trim();
    const token = await mint('--namespace', 'default', '--sub', 'ada', '--ttl', '1h');
    const tokenEnv = { ...cliEnv(), TEMPORAL_API_KEY: token };
    // In the namespace it names: list, start and stop a run with `troupe` (the user certificate and the token).
    expect(await ps({ ...tlsEnv, TEMPORAL_API_KEY: token })).toMatchObject({ code: 0 });
    const name = `token-${taskQueue.slice(-8)}`;
    const file = join(workerState, `${name}.yml`);
    writeFileSync(file, ['type: task', `name: ${name}`, 'groups:', '  - name: main', '    nodes: 1', '    resources: {cpu: 1..}', '    commands:', `      - echo 0 >> ${shared.dir}/${name}; sleep 3600`].join('\n'));
    await run(process.execPath, [cli, 'apply', '-f', file, '-y', '-d', '--name', name], { env: tokenEnv, timeout: 120_000 });
    await eventually('the run started', async () => (shared.lines(name).length > 0 ? true : undefined), 60_000);
    const { stderr } = await run(process.execPath, [cli, 'stop', name, '-y'], { env: tokenEnv, timeout: 120_000 });
    expect(stderr).toMatch(/STOPPED_BY_USER/);
    expect((await waitEnd(name)).termination_reason).toBe('STOPPED_BY_USER');

    // A namespace it does not name: refused, the reason printed as it is, exit 4.
    const elsewhere = await ps({ ...tlsEnv, TEMPORAL_API_KEY: await mint('--namespace', 'team-b', '--sub', 'bo', '--ttl', '1h') });
    expect(elsewhere.code).toBe(4);
    expect(elsewhere.out).toMatch(/^the Temporal service refused this client \(PERMISSION_DENIED\): troupe: the token of "bo" names the namespaces team-b \(user\), not "default": a token's holder acts in its team's namespaces only/);
    // An expired token and one signed by another key: refused with why.
    const expired = await mint('--namespace', 'default', '--sub', 'ada', '--ttl', '1s');
    await sleep(2100);
    const late = await ps({ ...tlsEnv, TEMPORAL_API_KEY: expired });
    expect(late.code).toBe(4);
    expect(late.out).toMatch(/: troupe: the token of "ada" expired at \S+; mint one with deploy\/make-token\.sh/);
    const forged = await ps({ ...tlsEnv, TEMPORAL_API_KEY: `${token.slice(0, token.lastIndexOf('.'))}.${Buffer.from('forged').toString('base64url')}` });
    expect(forged.code).toBe(4);
    expect(forged.out).toMatch(/: troupe: the token's signature is not this deployment's token key's/);

    // Never a worker's rights, whichever certificate carries it: the worker's too.
    for (const env of [tlsEnv, workerTlsEnv]) {
      const holder = await TroupeClient.connect({
        address,
        taskQueue,
        apiKey: token,
        tls: {
          serverRootCACertificate: readFileSync(env.TEMPORAL_TLS_SERVER_CA_CERT_PATH),
          clientCertPair: { crt: readFileSync(env.TEMPORAL_TLS_CLIENT_CERT_PATH), key: readFileSync(env.TEMPORAL_TLS_CLIENT_KEY_PATH) },
          serverNameOverride: 'localhost',
        },
      });
      try {
        const namespace = holder.temporal.options.namespace;
        expect(await refusalOf(() => holder.temporal.workflowService.pollWorkflowTaskQueue({ namespace, taskQueue: { name: taskQueue }, identity: 'token-test' }))).toMatch(/^denied: troupe: PollWorkflowTaskQueue: polling task queues .* only workers may/);
        expect(await refusalOf(() => holder.temporal.workflow.getHandle(`run/${name}`).signal('jobEvents', { submission: 0, events: [] }))).toMatch(/^denied: troupe: a user may send a run \(run\/<name>\) the signal stopRun only, not jobEvents/);
      } finally {
        await holder.close();
      }
    }
  });

  it("the workers' container healthcheck connects with the client certificate: healthy; without it, unhealthy and why", async () => {
    const healthcheck = (env: Record<string, string>) => {
      const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TEMPORAL_TLS')));
      return run(process.execPath, ['--import', 'tsx', join(repo, 'deploy', 'worker-healthcheck.ts')], {
        cwd: repo,
        env: { ...base, ...env, TEMPORAL_ADDRESS: address, TROUPE_TASK_QUEUE: taskQueue },
        timeout: 60_000,
      }).then(
        ({ stdout }) => ({ code: 0, out: stdout }),
        (err: { code: number; stdout: string }) => ({ code: err.code, out: err.stdout }),
      );
    };
    const healthy = await healthcheck(workerTlsEnv);
    expect(healthy.out).toMatch(/^healthy: the worker on .* polls; Temporal at /);
    expect(healthy.code).toBe(0);
    const plain = await healthcheck({});
    expect(plain).toMatchObject({ code: 1 });
    expect(plain.out).toMatch(/^unhealthy: cannot reach the Temporal service at .*: it speaks TLS and this client connected without; /);
  });

  it('runs the PD sample DONE; ps, logs and visibility lists by TroupeRunStatus and TroupeGroups find it', async () => {
    const name = `pd-${taskQueue.slice(-8)}`;
    await troupe!.submit({ plan: pdPlan(name, 3) });
    const state = await waitEnd(name);
    expect(state.status).toBe('DONE');
    expect(shared.lines(name).sort()).toEqual(['0', '1', '2']);
    expect(leftovers(state, fleetDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });

    const { stdout: ps } = await run(process.execPath, [cli, 'ps', '--all'], { env: cliEnv() });
    expect(ps).toMatch(new RegExp(`${name}\\s.*DONE`));
    const { stdout: log } = await run(process.execPath, [cli, 'logs', name], { env: cliEnv() });
    expect(log).toMatch(/router: prefill prefill\/0 -> decode decode\/0: Hello, world/);

    // Visibility on PostgreSQL catches up a moment after the workflow closed.
    for (const query of [
      `TroupeRunStatus = "DONE" AND TroupeRunName = "${name}"`,
      `TroupeGroups = "decode" AND TroupeRunName = "${name}"`,
    ]) {
      const found = await eventually(`a run listed by ${query}`, async () => {
        for await (const info of troupe!.temporal.workflow.list({ query })) return info.workflowId;
        return undefined;
      });
      expect(found).toContain(name);
    }
  });

  it('stops a running run with `troupe stop`: STOPPED_BY_USER, every node released', async () => {
    const name = `stop-${taskQueue.slice(-8)}`;
    const plan = pdPlan(name, 3600);
    await troupe!.submit({ plan });
    await eventually('the workers running', async () => (shared.lines(name).length >= 2 ? true : undefined), 60_000);
    const { stderr } = await run(process.execPath, [cli, 'stop', name, '-y'], { env: cliEnv(), timeout: 120_000 });
    expect(stderr).toMatch(/STOPPED_BY_USER/);
    const state = await waitEnd(name);
    expect(state.termination_reason).toBe('STOPPED_BY_USER');
    expect(leftovers(state, fleetDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
  });

  it('serves a gateway: /info with its token; killed with SIGKILL and `up` again, it serves its tables from its state file at once', async () => {
    const { GATEWAY_PORT, GATEWAY_ADMIN_PORT } = ports();
    const tokenFile = join(deployDir, 'gateway-admin.token');
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
    const admin: GatewayAdmin = { url: `http://127.0.0.1:${GATEWAY_ADMIN_PORT}`, token: readFileSync(tokenFile, 'utf8').trim() };
    expect(await gatewayInfo(admin)).toEqual({ data_plane_url: `http://127.0.0.1:${GATEWAY_PORT}`, domain: null });
    expect((await fetch(`${admin.url}/info`)).status).toBe(401);

    // A table with no ready replica: served, the gateway answers 503 with the reason (404 when it has no table).
    const svc = `gw-${taskQueue.slice(-8)}`;
    const table = { run: svc, generation: 3, auth: null, current_revision: 0, revisions: [{ number: 0, entry: ['main'], groups: [{ name: 'main', replicas: [] }] }] };
    await putServiceTable(admin, table);
    const served = async () => (await fetch(`http://127.0.0.1:${GATEWAY_PORT}/services/${svc}/`)).status;
    expect(await served()).toBe(503);

    const pid = servicePid('gateway');
    process.kill(pid, 'SIGKILL');
    await eventually('the gateway gone', async () => (ended(pid) ? true : undefined));
    await deploy(['up'], 180_000);
    expect(servicePid('gateway')).not.toBe(pid);
    // `up` returns once the admin API answers: the table is there with no push since.
    expect(await served()).toBe(503);
    const listed = (await (await fetch(`${admin.url}/services`, { headers: { Authorization: `Bearer ${admin.token}` } })).json()) as { services: Array<{ run: string; generation: number }> };
    expect(listed.services.find((t) => t.run === svc)?.generation).toBe(3);
    await deleteServiceTable(admin, svc);
    expect(await served()).toBe(404);
    const { stdout } = await deploy(['status'], 30_000);
    expect(stdout).toMatch(new RegExp(`^gateway  running  pid ${servicePid('gateway')}  http://127.0.0.1:${GATEWAY_PORT}`, 'm'));
  });

  it('survives PostgreSQL stopped and started again mid-run', async () => {
    await survives('postgres', async () => {
      await deploy(['stop', 'postgresql'], 60_000);
      await sleep(5000);
      await deploy(['up'], 180_000);
    });
  });

  it('survives the history service killed with SIGKILL and restarted', async () => {
    await survives('history', () => killService('history'));
  });

  it('survives the matching service killed with SIGKILL and restarted', async () => {
    await survives('matching', () => killService('matching'));
  });

  it('survives one of the two workers killed with SIGKILL', async () => {
    await survives('worker', async () => {
      const victim = workers.shift()!;
      await kill9(victim);
    });
    // Two workers again for what follows.
    await startWorker();
  });

  it('a run submitted while PostgreSQL is down is accepted once it is back, or refused with a clear message', async () => {
    const name = `pg-down-${taskQueue.slice(-8)}`;
    await deploy(['stop', 'postgresql'], 60_000);
    const outcome = troupe!.submit({ plan: pdPlan(name, 1) }).then(
      () => null,
      (err: unknown) => err as Error,
    );
    await sleep(8000);
    await deploy(['up'], 180_000);
    const refusal = await outcome;
    if (process.env.TROUPE_TEST_TIMING) console.log(`submitted while PostgreSQL was down: ${refusal ? `refused: ${refusal.message}` : 'accepted'}`);
    if (refusal === null) {
      const state = await waitEnd(name);
      expect(state.status).toBe('DONE');
      expect(shared.lines(name).sort()).toEqual(['0', '1', '2']);
    } else {
      expect(refusal.message).toMatch(/Temporal|unavailable|database|persistence/i);
      // Refused means not started: nothing runs that the user was told did not.
      await expect(troupe!.run(name).describe()).rejects.toThrow(/not found/i);
      expect(shared.lines(name)).toEqual([]);
    }
  });

  it('keeps retrying across a full server restart (retry.duration 2m) and ends RETRY_LIMIT_EXCEEDED on time', async () => {
    const name = `retry-${taskQueue.slice(-8)}`;
    const yaml = [
      'type: task',
      `name: ${name}`,
      'retry: {on_events: [error], duration: 2m}',
      'groups:',
      '  - name: flaky',
      '    nodes: 1',
      '    resources: {cpu: 1..}',
      '    commands:',
      // A file per attempt: each submission's job runs as a user of its own.
      `      - date +%s.%N > "$(mktemp ${shared.dir}/${name}.XXXXXX)"; exit 3`,
    ].join('\n');
    const attemptTimes = () =>
      readdirSync(shared.dir)
        .filter((f) => f.startsWith(`${name}.`))
        // mktemp makes the file before date writes it: an empty (or vanished) one is not an attempt yet.
        .flatMap((f) => {
          const seconds = Number(readFileNow(join(shared.dir, f)) || NaN);
          return Number.isFinite(seconds) ? [seconds * 1000] : [];
        })
        .sort((a, b) => a - b);
    const handle = await troupe!.submit({ yaml });
    const startedAt = (await handle.describe()).startTime.getTime();
    const deadline = startedAt + 120_000;

    await eventually('two attempts', async () => (attemptTimes().length >= 2 ? true : undefined), 60_000);
    // The whole server and its database go down for a while, then come back.
    await deploy(['down'], 120_000);
    const downAt = Date.now();
    await sleep(15_000);
    await deploy(['up'], 180_000);
    const upAt = Date.now();

    const state = await waitEnd(name, 300_000);
    const closedAt = (await handle.describe()).closeTime!.getTime();
    expect(state.termination_reason).toBe('RETRY_LIMIT_EXCEEDED');
    const attempts = attemptTimes();
    expect(attempts.filter((t) => t < downAt).length).toBeGreaterThanOrEqual(2);
    expect(attempts.filter((t) => t > upAt).length).toBeGreaterThanOrEqual(1);
    // The right time: a failure after the deadline ends the run, the one before it was retried.
    const last = attempts[attempts.length - 1]!;
    const previous = attempts[attempts.length - 2]!;
    expect(previous).toBeLessThan(deadline);
    expect(closedAt).toBeGreaterThanOrEqual(deadline);
    expect(closedAt - last).toBeLessThan(30_000);
    expect(leftovers(state, fleetDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
  }, 6 * 60_000);
});
