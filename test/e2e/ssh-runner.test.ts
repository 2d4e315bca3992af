import { randomUUID } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { InstanceUnreachableError, SubmissionClosedError, type JobFiles, type JobRef } from '../../src/backends/backend';
import {
  closeAllSshSessions,
  connectSsh,
  detectHost,
  HostKeyTrust,
  NoContainerRuntimeError,
  SshConnectionLostError,
  SshRunner,
} from '../../src/backends/ssh';
import { quoteShellWord } from '../../src/runner/shell-quote';
import { renderLaunchScript } from '../../src/runner/launch-script';
import { createTestHosts, type TestHosts } from './hosts';

/** The runner over SSH against real sshd hosts: start, state, log, stop, idempotence, host loss. */

const fast = { keepaliveIntervalMs: 500, keepaliveCountMax: 3, connectMs: 3_000, handshakeMs: 3_000 };

function jobRef(host: string, jobName = 'job-0', runId = `run-${randomUUID().slice(0, 8)}`): JobRef {
  return {
    run_id: runId,
    run_name: 'ssh-test',
    submission: 0,
    job_num: 0,
    job_name: jobName,
    instance: { instance_id: `${runId}-0-${jobName}`, host, internal_ip: '10.214.0.2', gpus: 0, details: {} },
  };
}

function files(runner: SshRunner, job: JobRef, commands: string[], env: Record<string, string> = {}): JobFiles {
  return {
    env: { DSTACK_NODE_RANK: String(job.job_num), DSTACK_MPI_HOSTFILE: `${runner.jobDirectory(job)}/hostfile`, ...env },
    hostfile: '10.214.0.2 slots=1\n10.214.0.3\n',
    script: renderLaunchScript({ commands, workingDir: null, image: null }),
  };
}

async function logUntil(runner: SshRunner, job: JobRef, pattern: RegExp, timeoutMs = 15_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  let log = '';
  while (Date.now() < deadline) {
    const chunk = await runner.readLog(job, 0, 1 << 20);
    log = chunk.data;
    if (pattern.test(log)) return log;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`log never matched ${pattern}: ${JSON.stringify(log)}`);
}

async function exitedState(runner: SshRunner, job: JobRef, timeoutMs = 15_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const state = await runner.jobState(job);
    if (state.state === 'exited') return state.exit_code;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('job never exited');
}


describe('SshRunner', () => {
  let hosts: TestHosts;

  /**
   * No process of a job is left on the host. Looked at for a few seconds: on a loaded machine the
   * last process the stop killed (or the stop session's own) may still be exiting when it returns;
   * one that lives on fails.
   */
  async function noJobProcessLeft(host: string): Promise<void> {
    await expect.poll(async () => (await hosts.jobProcesses(host)).map((p) => p.command), { timeout: 5_000, interval: 100 }).toEqual([]);
  }
  let trust: HostKeyTrust;
  const runner = (name: string, timeouts = {}): SshRunner =>
    new SshRunner(hosts.target(name), { trust, baseDir: hosts.host(name).jobBaseDir, timeouts });

  beforeAll(async () => {
    hosts = await createTestHosts([
      { name: 'cpu' },
      { name: 'gpu', gpus: { name: 'NVIDIA L40S', memoryMiB: 46068, count: 1 } },
      { name: 'hidden', behindJump: 'cpu' },
      { name: 'lost' },
      { name: 'docker-gpu', gpus: { name: 'NVIDIA H100 80GB HBM3', memoryMiB: 81559, count: 8 }, containerRuntime: 'fake-docker' },
    ]);
    trust = new HostKeyTrust({ knownHostsFiles: [hosts.knownHostsFile] });
  });

  afterEach(async () => {
    await closeAllSshSessions();
    // After every test: no job process left on any host. The control shells of the connections just
    // closed end as soon as their sshd has seen the close: a moment.
    for (const name of Object.keys(hosts.hosts)) {
      await expect.poll(() => hosts.jobProcesses(name), { message: `processes left on ${name}`, timeout: 3_000 }).toEqual([]);
    }
  });

  afterAll(async () => {
    await closeAllSshSessions();
    await hosts?.destroy();
  });

  it('starts a job detached, reads its state and log, and stops its whole process group', async () => {
    const r = runner('cpu');
    const job = jobRef('cpu');
    const { pid } = await r.startJob(
      job,
      files(r, job, [
        'echo "rank=$DSTACK_NODE_RANK"',
        'cat "$DSTACK_MPI_HOSTFILE"',
        // One child in the group, one that leaves it (setsid): both must go.
        'sleep 1000 & setsid sleep 1001 & echo spawned; wait',
      ]),
    );
    expect(pid).toBeGreaterThan(0);
    const log = await logUntil(r, job, /spawned/);
    expect(log).toBe('rank=0\n10.214.0.2 slots=1\n10.214.0.3\nspawned\n');
    expect(await r.jobState(job)).toEqual({ state: 'running', pid });

    // The job outlives the SSH connection that started it.
    await closeAllSshSessions();
    expect(await r.jobState(job)).toEqual({ state: 'running', pid });
    const commands = (await hosts.jobProcesses('cpu')).map((p) => p.command);
    expect(commands).toEqual(expect.arrayContaining(['sleep 1000', 'sleep 1001']));

    await r.stopJob(job, 5);
    await noJobProcessLeft('cpu');
    // SIGTERM ended the commands; the wrapper outlived them and wrote 128+15.
    expect(await r.jobState(job)).toEqual({ state: 'exited', pid, exit_code: 143 });
    // Idempotent: stopping again, and starting again, changes nothing.
    await r.stopJob(job, 5);
    expect(await r.startJob(job, files(r, job, ['echo second start']))).toEqual({ pid });
    expect((await r.readLog(job, 0, 1 << 20)).data).not.toContain('second start');
  });

  it('learns of a running job\'s end from the host: no command is sent while it runs', async () => {
    const r = runner('cpu');
    const job = jobRef('cpu');
    await r.startJob(job, files(r, job, ['echo waiting', 'while [ ! -e go ]; do sleep 0.05; done', 'exit 7']));
    await logUntil(r, job, /waiting/);
    const { pid } = (await r.jobState(job)) as { pid: number };
    const session = await connectSsh(hosts.target('cpu'), trust);
    const before = session.commandsSent;
    for (let i = 0; i < 20; i++) {
      expect(await r.jobState(job)).toEqual({ state: 'running', pid });
      await new Promise((res) => setTimeout(res, 50));
    }
    expect(session.commandsSent).toBe(before);

    // The host is a namespace on this machine: its files are ours to touch.
    writeFileSync(`${r.jobDirectory(job)}/work/go`, '');
    const ended = Date.now();
    expect(await exitedState(r, job)).toBe(7);
    expect(Date.now() - ended).toBeLessThan(3_000);
    // One command: the read that the pushed exit called for.
    expect(session.commandsSent).toBe(before + 1);
  });

  it('notices a job whose wrapper was killed (no exit to push) through its pid', async () => {
    const r = runner('cpu');
    const job = jobRef('cpu');
    const { pid } = await r.startJob(job, files(r, job, ['echo waiting', 'sleep 1000']));
    await logUntil(r, job, /waiting/);
    expect(await r.jobState(job)).toEqual({ state: 'running', pid });
    process.kill(-pid, 'SIGKILL');
    const killed = Date.now();
    expect(await exitedState(r, job)).toBe(137);
    expect(Date.now() - killed).toBeLessThan(3_000);
  });

  it('kills a job that ignores SIGTERM once the grace period is over', async () => {
    const r = runner('cpu');
    const job = jobRef('cpu');
    await r.startJob(job, files(r, job, ["trap '' TERM", 'echo ready', 'sleep 1000; sleep 1000']));
    await logUntil(r, job, /ready/);
    const started = Date.now();
    await r.stopJob(job, 1);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
    await noJobProcessLeft('cpu');
    expect(await r.jobState(job)).toMatchObject({ state: 'exited', exit_code: 137 });
  });

  it('starts a job at most once under concurrent and retried starts', async () => {
    const r = runner('cpu');
    const job = jobRef('cpu');
    // Each start that ran the commands would add one line to the log.
    const f = files(r, job, ['echo "started $$"', 'sleep 1000']);
    const others = [runner('cpu'), new SshRunner(hosts.target('cpu'), { trust: new HostKeyTrust({ knownHostsFiles: [hosts.knownHostsFile] }), baseDir: hosts.host('cpu').jobBaseDir })];
    const results = await Promise.all([...Array.from({ length: 4 }, () => r.startJob(job, f)), ...others.map((o) => o.startJob(job, f))]);
    expect(new Set(results.map((x) => x.pid)).size).toBe(1);
    await logUntil(r, job, /started/);
    await new Promise((res) => setTimeout(res, 300));
    expect((await r.readLog(job, 0, 1 << 20)).data.match(/started/g)).toHaveLength(1);
    expect((await hosts.jobProcesses('cpu')).filter((p) => p.command === 'sleep 1000')).toHaveLength(1);
    await r.stopJob(job, 2);
  });

  it('a stop before the start claims it: the start is refused and nothing runs', async () => {
    const r = runner('gpu');
    const job = jobRef('gpu');
    await r.stopJob(job, 1);
    await expect(r.startJob(job, files(r, job, ['echo should-not-run', 'sleep 1000']))).rejects.toBeInstanceOf(SubmissionClosedError);
    expect(await r.jobState(job)).toEqual({ state: 'absent' });
    expect((await r.readLog(job, 0, 1000)).data).toBe('');
    // A start racing a stop: whichever claims first wins, and nothing is left running either way.
    const raced = jobRef('gpu');
    const outcome = await Promise.allSettled([r.startJob(raced, files(r, raced, ['sleep 1000'])), r.stopJob(raced, 1)]);
    expect(outcome[1].status).toBe('fulfilled');
    if (outcome[0].status === 'rejected') expect(outcome[0].reason).toBeInstanceOf(SubmissionClosedError);
    await r.stopJob(raced, 1);
  });

  it('records the exit code and reads the log by offset without splitting a character', async () => {
    const r = runner('gpu');
    const job = jobRef('gpu');
    expect(await r.jobState(job)).toEqual({ state: 'absent' });
    await r.startJob(job, files(r, job, ["printf 'h\\xc3\\xa9llo\\n'", 'exit 3']));
    expect(await exitedState(r, job)).toBe(3);
    const all = await r.readLog(job, 0, 1000);
    expect(all).toEqual({ data: 'héllo\n', next_offset: 7 });
    // Two bytes stop inside "é": the chunk ends before it.
    const first = await r.readLog(job, 0, 2);
    expect(first).toEqual({ data: 'h', next_offset: 1 });
    const rest = await r.readLog(job, first.next_offset, 1000);
    expect(rest).toEqual({ data: 'éllo\n', next_offset: 7 });
    expect(await r.readLog(job, 7, 1000)).toEqual({ data: '', next_offset: 7 });
  });

  it('passes hostile env values to the commands unchanged and never executes them', async () => {
    const r = runner('cpu');
    const job = jobRef('cpu', "we'ird $(touch /tmp/pwned-name) `x` name");
    const values = {
      QUOTES: `it's "quoted" 'twice'`,
      DOLLAR: '$HOME ${PATH} $(touch /tmp/troupe-pwned) `touch /tmp/troupe-pwned`',
      NEWLINES: 'line one\nline two\n\nexport INJECTED=1',
      BACKSLASH: 'a\\b\\\\c \\n not a newline',
      UNICODE: 'ünïcødé ✓',
    };
    await r.startJob(job, files(r, job, ['for v in QUOTES DOLLAR NEWLINES BACKSLASH UNICODE; do printf "%s\\0" "${!v}"; done', 'printf "%s" "${INJECTED-unset}"'], values));
    expect(await exitedState(r, job)).toBe(0);
    const log = (await r.readLog(job, 0, 1 << 20)).data;
    const parts = log.split('\0');
    expect(parts.slice(0, 5)).toEqual(Object.values(values));
    expect(parts[5]).toBe('unset');
    const check = await (await connectSsh(hosts.target('cpu'), trust)).exec('ls /tmp/troupe-pwned /tmp/pwned-name 2>&1 || true');
    expect(check.stdout).toMatch(/No such file or directory[\s\S]*No such file or directory/);
    // The env file may hold secrets (HF_TOKEN): only the SSH user may read it.
    const mode = await (await connectSsh(hosts.target('cpu'), trust)).exec(`stat -c %a ${quoteShellWord(r.jobDirectory(job))}/job.env`);
    expect(mode.stdout).toBe('600\n');
    // Every directory of the run is the SSH user's alone: another user's jobs on the host read none of it.
    expect(await r.runnerReady()).toBe(true);
    const jobDir = r.jobDirectory(job);
    const dirs = [r.baseDir, jobDir.replace(/\/[^/]+\/[^/]+$/, ''), jobDir.replace(/\/[^/]+$/, ''), jobDir];
    const dirModes = await (await connectSsh(hosts.target('cpu'), trust)).exec(`stat -c %a ${dirs.map(quoteShellWord).join(' ')}`);
    expect(dirModes.stdout).toBe('700\n'.repeat(dirs.length));
    expect(r.jobDirectory(job)).toMatch(/\/we_ird_\$?.*-[0-9a-f]{10}$/);
    expect(r.jobDirectory(job)).not.toMatch(/[`'$ ()]/);
  });

  it('cleans up a run: leftover processes killed, everything but logs and exit codes removed', async () => {
    const r = runner('cpu');
    const runId = `run-${randomUUID().slice(0, 8)}`;
    const a = jobRef('cpu', 'job-a', runId);
    const b = jobRef('cpu', 'job-b', runId);
    await r.startJob(a, files(r, a, ['echo hello from a; sleep 1000']));
    await r.startJob(b, files(r, b, ['setsid sleep 1002 & wait']));
    await expect.poll(async () => (await hosts.jobProcesses('cpu')).length).toBeGreaterThanOrEqual(3);
    await expect.poll(async () => (await r.readLog(a, 0, 1000)).data).toBe('hello from a\n');
    await r.cleanupRun(runId);
    await noJobProcessLeft('cpu');
    const ssh = await connectSsh(hosts.target('cpu'), trust);
    const left = await ssh.exec(`cd ${quoteShellWord(hosts.host('cpu').jobBaseDir)}/${runId} && find . -type f | sort`);
    // (A job's wrapper may still record the exit code of its killed commands.)
    const kept = left.stdout.split('\n').filter((f) => f !== '' && !/^\.\/0\/job-[ab]\/exit_code$/.test(f));
    expect(kept).toEqual(['./.released', './0/job-a/log', './0/job-b/log']);
    // The log outlives the run (troupe logs after the end), the env file with its secrets does not.
    expect((await r.readLog(a, 0, 1000)).data).toBe('hello from a\n');
    await r.cleanupRun(runId);
    expect((await ssh.exec(`ls ${quoteShellWord(hosts.host('cpu').jobBaseDir)}/${runId}/0/job-a`)).stdout).toMatch(/^(exit_code\n)?log\n$/);
  });

  it('removes the logs of runs released longer ago than the retention, and no others', async () => {
    const r = runner('cpu');
    const base = quoteShellWord(hosts.host('cpu').jobBaseDir);
    const [old, recent, current] = ['old', 'recent', 'current'].map((n) => `run-${n}-${randomUUID().slice(0, 8)}`) as [string, string, string];
    for (const runId of [old, recent, current]) {
      const job = jobRef('cpu', 'job-0', runId);
      await r.startJob(job, files(r, job, ['echo done']));
      // A job that ends while its host's watcher starts is found by the watcher's /proc look, once a second.
      await expect.poll(async () => (await r.jobState(job)).state, { timeout: 5_000 }).toBe('exited');
    }
    await r.cleanupRun(old);
    await r.cleanupRun(recent);
    const ssh = await connectSsh(hosts.target('cpu'), trust);
    // `old` was released 8 days ago, `recent` 6 days ago.
    await ssh.exec(`find ${base}/${old} -type f -exec touch -d '8 days ago' {} + && find ${base}/${recent} -type f -exec touch -d '6 days ago' {} +`);
    await r.cleanupRun(current);
    const ls = (await ssh.exec(`ls ${base}`)).stdout;
    expect(ls).not.toContain(old);
    expect(ls).toContain(recent);
    expect(ls).toContain(current);
    await r.cleanupRun(current, 0);
  });

  it('fails an image job on a host without docker or podman, naming the host, and claims nothing', async () => {
    const r = runner('gpu');
    const job = jobRef('gpu');
    const err = (await r.startJob(job, files(r, job, ['true']), { image: 'lmsysorg/sglang:latest' }).catch((e: unknown) => e)) as Error;
    expect(err).toBeInstanceOf(NoContainerRuntimeError);
    expect(err.message).toBe(
      `job-0: image lmsysorg/sglang:latest cannot run on root@${hosts.host('gpu').address}:22: the host has neither docker nor podman (with a daemon that answers)`,
    );
    expect(await r.jobState(job)).toEqual({ state: 'absent' });
  });

  it('runs an image job through docker with the host network and GPUs, and stops it', async () => {
    const r = runner('docker-gpu');
    const facts = await detectHost(await connectSsh(hosts.target('docker-gpu'), trust));
    expect(facts.container_runtime).toBe('docker');
    const job = jobRef('docker-gpu');
    const dir = r.jobDirectory(job);
    const { pid } = await r.startJob(job, files(r, job, ['echo "in image: $DSTACK_NODE_RANK $TROUPE_INSTANCE_ID"', 'pwd', 'sleep 1000']), {
      image: 'lmsysorg/sglang:latest',
    });
    // The runtime sets the limits on its container (no limits line in the log): here the instance carries none but the default pids limit.
    expect(await logUntil(r, job, /work\n/)).toBe(`in image: 0 ${job.instance.instance_id}\n${dir}/work\n`);
    const runs = await hosts.dockerRuns('docker-gpu');
    expect(runs).toHaveLength(1);
    const args = runs[0]!;
    const pair = (flag: string) => args[args.indexOf(flag) + 1];
    expect(pair('--network')).toBe('host');
    expect(pair('--gpus')).toBe('all');
    expect(pair('-v')).toBe(`${dir}:${dir}`);
    expect(pair('-w')).toBe(`${dir}/work`);
    expect(args).toContain('lmsysorg/sglang:latest');
    expect(args).toContain('--init');
    expect(pair('--pids-limit')).toBe('4096');
    expect(args).not.toContain('--memory');
    expect(await r.jobState(job)).toEqual({ state: 'running', pid });
    await r.stopJob(job, 2);
    await noJobProcessLeft('docker-gpu');
  });

  it('runs probe scripts on the host: before start, with the job env after, killed at the deadline', async () => {
    const r = runner('cpu');
    const job = jobRef('cpu');
    expect(await r.exec(job, 'echo "$PWD ${DSTACK_NODE_RANK-none}"; exit 3', 5_000)).toEqual({ exit_code: 3, output: '/ none' });
    await r.startJob(job, files(r, job, ['sleep 1000']));
    expect(await r.exec(job, 'echo >&2 "rank $DSTACK_NODE_RANK"', 5_000)).toEqual({ exit_code: 0, output: 'rank 0' });
    const started = Date.now();
    expect(await r.exec(job, 'sleep 30 & sleep 31; echo never', 700)).toEqual({ exit_code: 124, output: '' });
    expect(Date.now() - started).toBeLessThan(5_000);
    await r.stopJob(job, 1);
  });

  it('pushes readiness from the host: no command while it probes, the outcome on disk for a worker that comes back', async () => {
    const r = runner('cpu');
    const session = await connectSsh(hosts.target('cpu'), trust);
    // Passes once `<hostfile>.go` exists; the hosts share this machine's file system, so the test makes it without a command.
    const probe = (budget_ms: number, script = 'test -e "$DSTACK_MPI_HOSTFILE.go" || { echo "  no go file yet "; exit 1; }') => ({ script, interval_s: 0.2, budget_ms });
    const job = jobRef('cpu', 'probed');
    await r.startJob(job, { ...files(r, job, ['sleep 1000']), ready_probe: probe(30_000) });
    expect((await r.jobState(job)).state).toBe('running');
    expect(await r.readiness(job)).toEqual({ state: 'pending' });
    const sent = session.commandsSent;
    const quietUntil = Date.now() + 1_500;
    while (Date.now() < quietUntil) {
      expect(await r.readiness(job)).toEqual({ state: 'pending' });
      expect((await r.jobState(job)).state).toBe('running');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    // Asked 15 times while the host probed 7 times: not one command.
    expect(session.commandsSent).toBe(sent);
    writeFileSync(`${r.jobDirectory(job)}/hostfile.go`, '');
    await expect.poll(() => r.readiness(job), { timeout: 5_000, interval: 50 }).toEqual({ state: 'ready' });
    // One read of the outcome once it was pushed.
    expect(session.commandsSent - sent).toBe(1);

    // The worker gone (its sessions and watcher with it) while the probe passes: the next one reads it on the host.
    const later = jobRef('cpu', 'probed-later');
    await r.startJob(later, { ...files(r, later, ['sleep 1000']), ready_probe: probe(30_000) });
    await closeAllSshSessions();
    writeFileSync(`${r.jobDirectory(later)}/hostfile.go`, '');
    await expect.poll(() => existsSync(`${r.jobDirectory(later)}/readiness`), { timeout: 5_000 }).toBe(true);
    expect(await runner('cpu').readiness(later)).toEqual({ state: 'ready' });

    // Out of time: the last answer, first non-empty line trimmed.
    const never = jobRef('cpu', 'never-ready');
    await r.startJob(never, { ...files(r, never, ['sleep 1000']), ready_probe: probe(600) });
    await expect.poll(() => r.readiness(never), { timeout: 5_000, interval: 100 }).toEqual({ state: 'not-ready', exit_code: 1, output: 'no go file yet' });
    for (const j of [job, later, never]) await r.stopJob(j, 1);
  });

  it('runs a job on a host behind a jump', async () => {
    const r = runner('hidden');
    expect(await r.runnerReady()).toBe(true);
    const job = jobRef('hidden');
    await r.startJob(job, files(r, job, ['hostname -I', 'sleep 1000']));
    expect((await logUntil(r, job, /\d+\.\d+\.\d+\.\d+/)).trim()).toBe(hosts.host('hidden').address);
    await r.stopJob(job, 1);
  });

  it('reports a host lost mid-run as InstanceUnreachableError within the keepalive limit', async () => {
    const r = runner('lost', fast);
    const job = jobRef('lost');
    await r.startJob(job, files(r, job, ['sleep 1000']));
    expect((await r.jobState(job)).state).toBe('running');
    const pending = r.stopJob(job, 30).catch((e: unknown) => e);
    const started = Date.now();
    await hosts.stopHost('lost');
    const err = (await pending) as InstanceUnreachableError;
    // Either the stop's channel died with the connection, or the stop finished first (then the state read fails).
    const failure = err instanceof Error ? err : ((await r.jobState(job).catch((e: unknown) => e)) as InstanceUnreachableError);
    expect(failure).toBeInstanceOf(InstanceUnreachableError);
    expect(failure.cause).toSatisfy((c: unknown) => c instanceof SshConnectionLostError || c instanceof Error);
    expect(failure.message).toContain(hosts.host('lost').address);
    expect(Date.now() - started).toBeLessThan(fast.keepaliveIntervalMs * (fast.keepaliveCountMax + 2) + fast.connectMs);
    expect(await r.runnerReady()).toBe(false);
  });
});
