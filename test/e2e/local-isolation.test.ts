import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobVisibleTempDir } from '../helpers/local-fleet';
import { lookupUser } from '../../src/backends/local/run-user';
import { TroupeClient, type RunHandle } from '../../src/client';
import { JobLayout } from '../../src/runner/job-layout';
import { filesNamedNow } from '../helpers/live-dir';
import { testClient, temporalAddress, uniqueTaskQueue } from '../helpers/temporal';
import { startWorkerProcess } from '../helpers/worker-process-control';
import { waitFor } from './local-fixtures';

/**
 * Two runs on the local fleet as root (network namespaces): a victim that holds a secret and
 * prints a canary, and an attacker whose job tries, one line per attempt, to read the victim's
 * env file and log, the worker's environment and the secret key, to signal the worker and the
 * victim, and to write outside its job directory. Every attempt must fail, inside (its log) and
 * outside (nothing written, nothing killed). After the runs: no env file, no run user.
 */

const root = process.getuid?.() === 0;
const scratch = mkdtempSync(join(tmpdir(), 'troupe-isolation-'));
const stateDir = join(scratch, 'fleet');
const keyDir = join(scratch, 'key');
const keyFile = join(keyDir, 'secret.key');
// Elsewhere than the secret key: its own directory must be hidden too. Made by the test's client.
const codecKeyFile = join(scratch, 'codec', 'codec.keys');
// Open to every run's user: the victim waits here for the test to let it end.
const shared = jobVisibleTempDir('troupe-isolation-shared-');
chmodSync(shared, 0o1777);
const canary = randomBytes(12).toString('hex');
const taskQueue = uniqueTaskQueue('isolation');
const previousKeyFile = process.env.TROUPE_SECRET_KEY_FILE;
const previousCodecKeyFile = process.env.TROUPE_CODEC_KEY_FILE;
const outsideWrites = [join(stateDir, 'pwned'), join(keyDir, 'pwned'), `/etc/troupe-pwned-${canary}`];
let worker: ChildProcess | null = null;
let client: Client;
let closeClient: () => Promise<void>;
let troupe: TroupeClient;

beforeAll(async () => {
  if (!root) return;
  process.env.TROUPE_SECRET_KEY_FILE = keyFile;
  process.env.TROUPE_CODEC_KEY_FILE = codecKeyFile;
  ({ client, close: closeClient } = await testClient());
  troupe = new TroupeClient(client, { taskQueue, address: temporalAddress() });
  worker = await startWorkerProcess({
    taskQueue,
    localStateDir: stateDir,
    env: { TROUPE_SECRET_KEY_FILE: keyFile, TROUPE_CODEC_KEY_FILE: codecKeyFile, WORKER_ONLY_CANARY: `worker-${canary}` },
  });
});
afterAll(async () => {
  if (worker && worker.exitCode === null) worker.kill('SIGKILL');
  await closeClient?.();
  for (const path of outsideWrites) rmSync(path, { force: true });
  rmSync(scratch, { recursive: true, force: true });
  rmSync(shared, { recursive: true, force: true });
  if (previousKeyFile === undefined) delete process.env.TROUPE_SECRET_KEY_FILE;
  else process.env.TROUPE_SECRET_KEY_FILE = previousKeyFile;
  if (previousCodecKeyFile === undefined) delete process.env.TROUPE_CODEC_KEY_FILE;
  else process.env.TROUPE_CODEC_KEY_FILE = previousCodecKeyFile;
});

function task(name: string, commands: string): string {
  const indented = commands.split('\n').map((line) => `        ${line}`).join('\n');
  return ['type: task', `name: ${name}`, 'env:', `  - VICTIM_TOKEN=token-${canary}`, 'commands:', '  - |', indented, ''].join('\n');
}

async function logOf(run: RunHandle): Promise<string> {
  return (await run.readLog(0)).data;
}

describe.skipIf(!root)('local fleet isolation (as root)', () => {
  it("keeps one run's job away from another run, the worker and the key; leaves no env file and no user behind", async () => {
    const workerPid = worker!.pid!;
    // The worker really has what the attacker will look for, readable by root.
    expect(readFileSync(`/proc/${workerPid}/environ`, 'latin1')).toContain(`WORKER_ONLY_CANARY=worker-${canary}`);

    const victim = await troupe.submit({
      yaml: task(
        `victim-${canary.slice(0, 8)}`,
        [
          'echo "user $(id -un) $(id -u)"',
          `echo "log-canary-${canary}"`,
          `until [ -f ${shared}/release ]; do sleep 0.1; done`,
          'echo released',
        ].join('\n'),
      ),
    });
    const victimLog = await waitFor('the victim to print', async () => {
      const log = await logOf(victim);
      return log.includes('log-canary') && log;
    }, 60_000);
    const victimUser = /^user (\S+) (\d+)$/m.exec(victimLog);
    expect(victimUser?.[2]).not.toBe('0');
    expect(existsSync(keyFile)).toBe(true);
    expect(existsSync(codecKeyFile)).toBe(true);

    const victimEnv = filesNamedNow(join(stateDir, 'runs'), JobLayout.env);
    expect(victimEnv).toHaveLength(1);
    const victimDir = join(victimEnv[0]!, '..');
    const victimWrapper = Number(readFileSync(join(victimDir, JobLayout.started, JobLayout.pid), 'utf8').split(' ')[0]);
    // Its files: the run's group may read them, nobody else.
    const envStat = statSync(victimEnv[0]!);
    expect(envStat.mode & 0o777).toBe(0o640);
    expect(envStat.uid).toBe(0);
    expect(envStat.gid).toBe((await lookupUser(victimUser![1]!))?.gid);
    expect(statSync(victimDir).mode & 0o777).toBe(0o750);
    expect(readFileSync(victimEnv[0]!, 'utf8')).toContain(`token-${canary}`);

    const attempts: Array<[string, string]> = [
      ['read the other run\'s env file', `cat ${victimEnv[0]}`],
      ['read the other run\'s log', `cat ${join(victimDir, JobLayout.log)}`],
      ['list the fleet\'s state directory', `ls ${join(stateDir, 'runs', readdirSync(join(stateDir, 'runs'))[0]!)}`],
      ["read the worker's environ", `grep -q WORKER_ONLY_CANARY /proc/${workerPid}/environ`],
      ['read the secret key', `cat ${keyFile}`],
      ['read the codec keys', `cat ${codecKeyFile}`],
      ['signal the worker', `kill -TERM ${workerPid}`],
      ["signal the other run's job", `kill -TERM ${victimWrapper}`],
      ['write into the state directory', `echo x > ${outsideWrites[0]}`],
      ["write into the key's directory", `echo x > ${outsideWrites[1]}`],
      ['write into /etc', `echo x > ${outsideWrites[2]}`],
      ["write into the other run's work directory", `echo x > ${join(victimDir, JobLayout.workDir, 'pwned')}`],
    ];
    const script = [
      'echo "user $(id -un) $(id -u)"',
      ...attempts.map(([what, command]) => `if ( ${command} ) >/dev/null 2>&1; then echo "ATTEMPT ${what}: SUCCEEDED"; else echo "ATTEMPT ${what}: failed"; fi`),
      'echo "processes visible: $(ls /proc | grep -c "^[0-9]")"',
    ].join('\n');
    const attacker = await troupe.submit({ yaml: task(`attacker-${canary.slice(0, 8)}`, script) });
    const attackerEnd = await attacker.wait();
    expect(attackerEnd.status).toBe('DONE');
    const attackerLog = await logOf(attacker);
    const lines = attackerLog.split('\n').filter((l) => l.startsWith('ATTEMPT '));
    expect(lines).toEqual(attempts.map(([what]) => `ATTEMPT ${what}: failed`));
    const attackerUser = /^user (\S+) (\d+)$/m.exec(attackerLog);
    expect(attackerUser?.[2]).not.toBe('0');
    expect(attackerUser?.[1]).not.toBe(victimUser?.[1]);
    // Its own pid namespace: its shell, the commands and `ls`, not the machine's hundreds.
    expect(Number(/^processes visible: (\d+)$/m.exec(attackerLog)?.[1])).toBeLessThan(10);

    // From outside: nothing written, nobody killed.
    for (const path of [...outsideWrites, join(victimDir, JobLayout.workDir, 'pwned')]) expect(existsSync(path), path).toBe(false);
    expect(worker!.exitCode).toBeNull();
    writeFileSync(join(shared, 'release'), '');
    const victimEnd = await victim.wait();
    expect(victimEnd.status).toBe('DONE');
    expect(await logOf(victim)).toContain('released');

    // Nothing secret at rest: the env files are gone, the logs stay; the runs' users are gone.
    await waitFor('teardown to remove the env files and users', async () => {
      if (filesNamedNow(join(stateDir, 'runs'), JobLayout.env).length > 0) return false;
      return (await lookupUser(victimUser![1]!)) === null && (await lookupUser(attackerUser![1]!)) === null;
    }, 30_000);
    const logs = filesNamedNow(join(stateDir, 'runs'), JobLayout.log);
    expect(logs).toHaveLength(2);
    for (const log of logs) expect(readdirSync(join(log, '..')).sort()).toEqual([JobLayout.exitCode, JobLayout.log, JobLayout.started]);
  });
});
