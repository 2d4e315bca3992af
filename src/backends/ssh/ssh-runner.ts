import { randomBytes } from 'node:crypto';
import type { SFTPWrapper } from 'ssh2';
import {
  InstanceUnreachableError,
  SubmissionClosedError,
  type ExecResult,
  type JobFiles,
  type JobProcessState,
  type JobRef,
  type LogChunk,
  type NodeSshKeys,
  type PeersFile,
  type ReadinessState,
} from '../backend';
import { renderEnvFile } from '../../runner/env-file';
import { JobLayout as L } from '../../runner/job-layout';
import { renderJobWrapper } from '../../runner/job-wrapper';
import { renderNodeSsh, SshLayout } from '../../runner/inter-node-ssh';
import { nodeSshPort } from './node-ssh-port';
import { connectSsh } from './connect';
import { isHostUnreachable, SshCommandError, SshError } from './errors';
import type { HostKeyTrust } from './host-key-trust';
import { JobWatch } from './job-watch';
import { parseReadiness, PROBE_FILE, READINESS_FILE, READY_LOOP_FILE, renderReadyLoop } from './ready-loop';
import { checkBaseDir, containerName, jobDirectory, runDirectory } from './job-paths';
import {
  CLAIM_WAIT_SECONDS,
  CONTAINER_COMMANDS_FILE,
  KILLED_EXIT_CODE,
  INSTANCE_FILE,
  MARKER_NAME,
  cleanupJobScript,
  cleanupRunScript,
  LOG_RETENTION_DAYS,
  PEERS_VERSION_FILE,
  jobStateScript,
  prepareStartScript,
  renderContainerLaunchScript,
  resultOf,
  spawnWrapperScript,
  startJobScript,
  frameUploads,
  stopJobScript,
  writePeersScript,
} from './job-scripts';
import type { CommandResult, SshSession } from './session';
import { quoteShellWord } from '../../runner/shell-quote';
import { jobUsageScript, parseJobUsage } from './usage-script';
import type { JobUsage } from '../job-usage';
import { describeTarget, type SshTarget } from './target';
import { outOfMemoryReason, type CgroupHierarchy } from '../cgroup-limits';
import {
  cgroupParentFrom,
  cgroupProbeScript,
  limitsOfDetails,
  parseCgroupProbe,
  sshCgroupName,
  sshCgroupParents,
  sshJobCgroup,
  sshRunCgroupPrefix,
} from './job-cgroup-script';
import { shmBytesOfDetails } from './container-limits';
import { parsePrivilegesProbe, privilegesProbeScript, privilegesWords } from './job-privileges-script';
import type { Confinement } from '../no-new-privs';
import { resolveTimeouts, type SshTimeouts } from './timeouts';

export interface SshRunnerOptions {
  trust: HostKeyTrust;
  /** Absolute job base directory on the host (defaultJobBaseDir(facts) is `~/.troupe/jobs`). */
  baseDir: string;
  timeouts?: Partial<SshTimeouts>;
  /**
   * For an SSH user who is not root: its delegated cgroup subtree, relative to each cgroup mount
   * (job-cgroup-script.ts); null for the default. Default: the worker's TROUPE_SSH_CGROUP_PARENT.
   */
  cgroupParent?: string | null;
}

export interface StartJobOptions {
  /** Run the commands in this image (docker or podman on the host, host network, host GPUs). */
  image?: string | null;
}

/** What a host gives a job: a cgroup for its limits, and no new privileges. */
interface HostWalls {
  hierarchy: CgroupHierarchy;
  confinement: Confinement;
}

/** What exec() reports for a script killed at its deadline (as coreutils `timeout` does). */
export const EXEC_TIMED_OUT_EXIT_CODE = 124;

/** `image:` was asked for on a host with neither docker nor podman answering. */
export class NoContainerRuntimeError extends SshError {
  override name = 'NoContainerRuntimeError';
}

/** stopJob or cleanupRun could not make every process of a job go away. */
export class JobStopFailedError extends SshError {
  override name = 'JobStopFailedError';
}

/**
 * The runner on one SSH host: the Backend job methods (startJob, jobState, stopJob, readLog) with
 * the same semantics as the local fleet (src/backends/backend.ts), over one pooled connection.
 * Idempotent and safe to retry: the start is claimed on the host with an atomic mkdir, so of
 * concurrent or retried starts exactly one runs the commands, and a stop claims the start too.
 * A host that cannot be reached yields InstanceUnreachableError (its cause: the typed SSH error).
 */
export class SshRunner {
  readonly baseDir: string;
  private readonly host: string;
  /** Exits pushed from the host: a running job costs no command on it (src/backends/ssh/job-watch.ts). */
  private readonly watch: JobWatch;
  /** The connection on which runnerReady() last found the job base directory writable. */
  private readyOn: SshSession | null = null;
  /** What the host gives a job's walls, as probed on this connection. */
  private probedOn: { session: SshSession; walls: HostWalls } | null = null;
  /** The delegated subtree the worker names for an SSH user who is not root (null: the default). */
  private readonly cgroupParent: string | null;

  constructor(
    readonly target: SshTarget,
    private readonly options: SshRunnerOptions,
  ) {
    this.baseDir = checkBaseDir(options.baseDir);
    this.host = describeTarget(target);
    this.cgroupParent = options.cgroupParent === undefined ? cgroupParentFrom(process.env) : options.cgroupParent;
    this.watch = new JobWatch(this.watchersDirectory(), () => this.session(), resolveTimeouts(options.timeouts).commandMs);
  }

  /** Where the job watchers' FIFOs are (a name no run directory can have: those never start with a dot). */
  watchersDirectory(): string {
    return `${this.baseDir}/.watchers`;
  }

  jobDirectory(job: Pick<JobRef, 'run_id' | 'submission' | 'job_name' | 'attempt'>): string {
    return jobDirectory(this.baseDir, job);
  }

  /**
   * True when the host answers and its job base directory is writable; false while it cannot be
   * reached. The directory is the SSH user's alone (0700): another user's jobs on the host cannot
   * read this user's runs (their hostfiles, scripts, logs). Checked once per connection: while
   * that connection lives (its keepalive answered), the host is taken as ready without a command.
   */
  async runnerReady(): Promise<boolean> {
    try {
      const session = await this.session();
      if (this.readyOn === session && !session.closed) return true;
      const dir = quoteShellWord(this.baseDir);
      const result = await session.exec(`mkdir -p ${dir} && chmod 700 ${dir} && test -w ${dir}`);
      if (result.exitCode === 0) this.readyOn = session;
      return result.exitCode === 0;
    } catch (err) {
      if (isHostUnreachable(err)) return false;
      throw err;
    }
  }

  /**
   * Uploads env, hostfile, launch script and wrapper by SFTP (each replaced atomically, so a
   * wrapper already running keeps reading what it started with), then starts the wrapper in a new
   * session on the host. Returns the pid of whichever start won the claim; throws
   * SubmissionClosedError when a stop claimed the job first.
   */
  async startJob(job: JobRef, files: JobFiles, options: StartJobOptions = {}): Promise<{ pid: number }> {
    return this.reachable(async (session) => {
      const dir = this.jobDirectory(job);
      const image = options.image ?? null;
      if (image === null) {
        const uploads = this.jobUploads(job, files, null).map(([name, content, mode]) => ({ name, mode, content: Buffer.from(content, 'utf8') }));
        const { hierarchy, confinement } = await this.hostWalls(session);
        const cgroup = sshJobCgroup(hierarchy, this.cgroupName(job), limitsOfDetails(job.instance.details));
        const script = startJobScript(dir, job.instance.instance_id, randomBytes(6).toString('hex'), { cgroup, confinement });
        const words = await this.script(session, 'start the job', script, (CLAIM_WAIT_SECONDS + 30) * 1000, frameUploads(uploads));
        return this.startOutcome(job, dir, words);
      }
      const prepared = await this.script(session, 'prepare the job directory', prepareStartScript(dir, true));
      const [state, runtime] = prepared;
      if (state === 'no-runtime') {
        throw new NoContainerRuntimeError(
          this.host,
          `${job.job_name}: image ${image} cannot run on ${this.host}: the host has neither docker nor podman (with a daemon that answers)`,
        );
      }
      if (state === 'ready') {
        const uploads = this.jobUploads(job, files, image);
        if (runtime === 'docker' || runtime === 'podman') {
          uploads.push([CONTAINER_COMMANDS_FILE, files.script, 0o755]);
          const limits = limitsOfDetails(job.instance.details);
          const launch = renderContainerLaunchScript({ jobDir: dir, image, runtime, containerName: containerName(dir), limits, shmBytes: shmBytesOfDetails(job.instance.details) });
          uploads.push([L.launchScript, launch, 0o755]);
        } else {
          uploads.push([L.launchScript, files.script, 0o755]);
        }
        await this.upload(session, dir, uploads);
      }
      // No cgroup or walls of Troupe's: the runtime sets the limits on its container (launch.sh) and its own seccomp profile holds inside; podman without root needs user namespaces.
      const script = spawnWrapperScript(dir, job.instance.instance_id);
      const words = await this.script(session, 'start the job', script, (CLAIM_WAIT_SECONDS + 20) * 1000);
      return this.startOutcome(job, dir, words);
    });
  }

  /**
   * The job's files (without an image, its launch script too): env (0600: it may hold secrets),
   * hostfile, wrapper, instance id; its readiness probe and the loop that runs it, if any;
   * its first address book (peers.json and its version), if any;
   * in a run of two or more nodes, its inter-node SSH files (`ssh/`: keys 0600), and the wrapper
   * starts the job's SSH server first.
   */
  private jobUploads(job: JobRef, files: JobFiles, image: string | null): Array<[string, string, number]> {
    const ssh = files.ssh && image === null ? this.nodeSshUploads(job, files.ssh) : [];
    const probe: Array<[string, string, number]> = files.ready_probe
      ? [
          [PROBE_FILE, files.ready_probe.script, 0o644],
          [READY_LOOP_FILE, renderReadyLoop(files.ready_probe, this.watchersDirectory()), 0o644],
        ]
      : [];
    const peers: Array<[string, string, number]> = files.peers
      ? [
          [PEERS_VERSION_FILE, `${Math.trunc(files.peers.version)}\n`, 0o644],
          [L.peers, files.peers.json, 0o644],
        ]
      : [];
    const uploads: Array<[string, string, number]> = [
      [L.env, renderEnvFile(files.env), 0o600],
      [L.hostfile, files.hostfile, 0o644],
      ...peers,
      [
        L.wrapper,
        renderJobWrapper({
          notifyDir: this.watchersDirectory(),
          ...(ssh.length > 0 ? { entry: `${SshLayout.dir}/${SshLayout.run}` } : {}),
          ...(probe.length > 0 ? { readyLoop: READY_LOOP_FILE } : {}),
        }),
        0o755,
      ],
      [INSTANCE_FILE, `${job.instance.instance_id}\n`, 0o644],
      ...ssh,
      ...probe,
    ];
    return image !== null ? uploads : [...uploads, [L.launchScript, files.script, 0o755]];
  }

  /** A server of the job's own on a port derived from the job (nodeSshPort), as the fleet's SSH user. */
  private nodeSshUploads(job: JobRef, keys: NodeSshKeys): Array<[string, string, number]> {
    const rendered = renderNodeSsh({
      jobDir: this.jobDirectory(job),
      keys,
      listen: { ip: job.instance.internal_ip, port: nodeSshPort(job.run_id, job.submission, job.job_num) },
      peerPorts: keys.peers.map((peer, i) => nodeSshPort(job.run_id, job.submission, peer.job_num ?? i)),
      user: this.target.user,
      home: null,
      tmpdir: null,
      // A command started over SSH runs in a session of its own: the marker lets a stop find it.
      sessionEnv: { [MARKER_NAME]: job.instance.instance_id },
      sshd: '/usr/sbin/sshd',
      ssh: '/usr/bin/ssh',
    });
    return Object.entries(rendered.files).map(([name, content]) => [`${SshLayout.dir}/${name}`, content, rendered.scripts.includes(name) ? 0o700 : 0o600]);
  }

  /** The job attempt's cgroup on its host (job-cgroup-script.ts). */
  private cgroupName(job: JobRef): string {
    return sshCgroupName(runDirectory(this.baseDir, job.run_id), this.jobDirectory(job));
  }

  /** The host's hierarchy for job limits and whether it can forbid new privileges: probed once per connection (one command). */
  private async hostWalls(session: SshSession): Promise<HostWalls> {
    if (this.probedOn?.session === session && !session.closed) return this.probedOn.walls;
    const result = await session.exec(`${privilegesProbeScript()}\n${cgroupProbeScript(this.cgroupParent)}`);
    const stdout = result.exitCode === 0 ? result.stdout : '';
    const walls = { hierarchy: parseCgroupProbe(stdout, this.host), confinement: parsePrivilegesProbe(stdout, this.host) };
    this.probedOn = { session, walls };
    return walls;
  }

  /** What the spawn step answered: the pid of whichever start won, or why there is none. */
  private startOutcome(job: JobRef, dir: string, [outcome, pid, ...rest]: string[]): { pid: number } {
    if (outcome === 'started' && Number(pid) > 0) return { pid: Number(pid) };
    if (outcome === 'stopped') {
      throw new SubmissionClosedError(`${job.job_name} was stopped before it started; it will not start any more`);
    }
    throw new SshCommandError(this.host, `start ${job.job_name}`, 0, `no process recorded in ${dir} after ${CLAIM_WAIT_SECONDS}s ${rest.join(' ')}`);
  }

  /**
   * While the host's job watcher vouches that the job runs, answered here without a command on the
   * host; else (first check, an exit or a lost process reported, the watcher gone) read on the host.
   */
  async jobState(job: JobRef): Promise<JobProcessState> {
    const dir = this.jobDirectory(job);
    const watchedPid = this.watch.runningPid(dir);
    if (watchedPid !== null) return { state: 'running', pid: watchedPid };
    const since = this.watch.begin(dir);
    try {
      const state = await this.reachable(async (session): Promise<JobProcessState> => {
        const parents = sshCgroupParents((await this.hostWalls(session)).hierarchy);
        const [found, pid, code, oomKills] = await this.script(session, 'read the job state', jobStateScript(dir, this.cgroupName(job), parents));
        if (found === 'running') return { state: 'running', pid: Number(pid) };
        if (found === 'exited') {
          // Killed by the kernel for its cgroup's memory limit: the reason names the limit, as on the local fleet.
          const oom = Number(code) !== 0 && Number(oomKills) > 0;
          return { state: 'exited', pid: Number(pid), exit_code: Number(code), ...(oom ? { reason: outOfMemoryReason(limitsOfDetails(job.instance.details).memory_bytes) } : {}) };
        }
        return { state: 'absent' };
      });
      if (state.state === 'running') await this.watch.watchRunning(dir, state.pid, since);
      else this.watch.forget(dir);
      return state;
    } finally {
      this.watch.end(dir);
    }
  }

  /**
   * The outcome of the job's readiness loop (ready-loop.ts): while the host's job watcher vouches
   * that it is still pending, answered here without a command; else (first ask, an outcome
   * pushed, the watcher gone) read from the job's `readiness` file on the host.
   */
  async readiness(job: JobRef): Promise<ReadinessState> {
    const dir = this.jobDirectory(job);
    if (this.watch.readinessPending(dir)) return { state: 'pending' };
    const since = this.watch.begin(dir);
    try {
      const state = await this.reachable(async (session) => {
        const result = await session.exec(`cat ${quoteShellWord(`${dir}/${READINESS_FILE}`)} 2>/dev/null || echo "result pending"`);
        return parseReadiness(result.stdout.startsWith('result pending') ? null : result.stdout);
      });
      if (state.state === 'pending') await this.watch.watchReadiness(dir, since);
      else this.watch.forgetReadiness(dir);
      return state;
    } finally {
      this.watch.end(dir);
    }
  }

  /** SIGTERM to the job's processes (group, session, and any carrying its marker), SIGKILL after the grace period. */
  async stopJob(job: JobRef, graceSeconds: number): Promise<void> {
    this.watch.forget(this.jobDirectory(job));
    await this.reachable(async (session) => {
      const result = await this.script(
        session,
        'stop the job',
        stopJobScript(this.jobDirectory(job), job.instance.instance_id, graceSeconds),
        (graceSeconds + CLAIM_WAIT_SECONDS + 30) * 1000,
      );
      if (result[0] === 'survivors') {
        throw new JobStopFailedError(this.host, `${job.job_name}: processes ${result.slice(1).join(', ')} on ${this.host} survive SIGKILL`);
      }
    });
  }

  /**
   * Replaces the job's peers.json (writePeersScript: one command; atomic, never by an older
   * version, nothing written where the job is not, or no longer, set up).
   */
  async writePeers(job: JobRef, peers: PeersFile): Promise<void> {
    await this.reachable(async (session) => {
      const script = writePeersScript(this.jobDirectory(job), peers.version, randomBytes(6).toString('hex'));
      await this.script(session, 'write the peers file', script, undefined, Buffer.from(peers.json, 'utf8'));
    });
  }

  /** What is left of one job attempt killed, its files but log, exit code and start claim removed (cleanupJobScript). */
  async cleanupJob(job: JobRef): Promise<void> {
    const dir = this.jobDirectory(job);
    this.watch.forget(dir);
    await this.reachable(async (session) => {
      const parents = sshCgroupParents((await this.hostWalls(session)).hierarchy);
      const result = await this.script(session, 'clean up the job', cleanupJobScript(dir, this.cgroupName(job), parents), 60_000);
      if (result[0] === 'survivors') {
        throw new JobStopFailedError(this.host, `${job.job_name}: processes ${result.slice(1).join(', ')} on ${this.host} survive SIGKILL`);
      }
    });
  }

  /** Up to `limitBytes` of the job's log from `offset`, never ending inside a UTF-8 character. */
  async readLog(job: JobRef, offset: number, limitBytes: number): Promise<LogChunk> {
    const path = `${this.jobDirectory(job)}/${L.log}`;
    return this.reachable((session) =>
      session.sftp(`read ${path}`, async (sftp) => {
        const bytes = await readRange(sftp, path, offset, Math.max(0, limitBytes));
        if (bytes === null) return { data: '', next_offset: offset };
        const length = wholeCharacters(bytes);
        return { data: bytes.subarray(0, length).toString('utf8'), next_offset: offset + length };
      }),
    );
  }

  /**
   * Runs a short bash script on the job's host (a readiness probe): in the job's directory with
   * its env when the job has started, else in `/`. Resolves with the exit code and the first line
   * of output; past `timeoutMs` the script's process group is killed and the code is 124.
   */
  /** What the job uses on the host now (usage-script.ts), or null when it does not run there. */
  async usage(job: JobRef): Promise<JobUsage | null> {
    return this.reachable(async (session) => {
      const result = await session.exec(jobUsageScript(this.jobDirectory(job)));
      if (result.exitCode !== 0) throw new SshCommandError(this.host, 'read the job\'s usage', result.exitCode, `${result.stderr}${result.stdout}`);
      const usage = parseJobUsage(result.stdout);
      // Where the host takes limits, the job's memory limit is its cgroup's (the script sees only a v2 one of its own).
      const limit = limitsOfDetails(job.instance.details).memory_bytes;
      if (usage === null || limit === null || (await this.hostWalls(session)).hierarchy.version === null) return usage;
      return { ...usage, memory_limit_bytes: usage.memory_limit_bytes === null ? limit : Math.min(limit, usage.memory_limit_bytes) };
    });
  }

  async exec(job: JobRef, script: string, timeoutMs: number): Promise<ExecResult> {
    const dir = quoteShellWord(this.jobDirectory(job));
    const seconds = (Math.max(1, timeoutMs) / 1000).toFixed(3);
    return this.reachable(async (session) => {
      // A peers hook or probe runs from outside the job's processes: under the same walls as they.
      const walls = privilegesWords((await this.hostWalls(session)).confinement);
      const wrapped = [
        `if [ -f ${dir}/${L.env} ]; then cd ${dir} && { . ./${L.env} || exit 126; }; else cd /; fi`,
        `exec ${walls}timeout -s KILL ${seconds} bash --noprofile --norc -c ${quoteShellWord(script)} </dev/null 2>&1`,
      ].join('\n');
      const started = Date.now();
      const result = await session.exec(wrapped, { timeoutMs: timeoutMs + 10_000 });
      // `timeout -s KILL` kills its own process group, itself included: the command ends by signal.
      const killed = result.exitCode === KILLED_EXIT_CODE || result.signal === 'SIGKILL';
      const timedOut = killed && Date.now() - started >= timeoutMs;
      const output = result.stdout.split('\n').find((line) => line.trim() !== '')?.trim() ?? '';
      return { exit_code: timedOut ? EXEC_TIMED_OUT_EXIT_CODE : (result.exitCode ?? KILLED_EXIT_CODE), output };
    });
  }

  /**
   * Kills whatever still runs from the run's jobs on this host and removes the run's files but its
   * logs and exit codes; runs released on this host more than `retentionDays` ago go. Idempotent.
   * `jobDirs`: only these jobs are this host's (hosts that share a home directory share the run's directory).
   */
  async cleanupRun(runId: string, retentionDays = LOG_RETENTION_DAYS, jobDirs: readonly string[] | null = null): Promise<void> {
    this.watch.forget(runDirectory(this.baseDir, runId));
    await this.reachable(async (session) => {
      const runDir = runDirectory(this.baseDir, runId);
      // Each job's cgroup, or every job's of the run (by the prefix their names share).
      const cgroups = jobDirs === null ? [`${sshRunCgroupPrefix(runDir)}*`] : jobDirs.map((jobDir) => sshCgroupName(runDir, jobDir));
      const script = cleanupRunScript(runDir, retentionDays, jobDirs, cgroups, sshCgroupParents((await this.hostWalls(session)).hierarchy));
      const result = await this.script(session, 'clean up the run', script, 60_000);
      if (result[0] === 'survivors') {
        throw new JobStopFailedError(this.host, `run ${runId}: processes ${result.slice(1).join(', ')} on ${this.host} survive SIGKILL`);
      }
    });
  }

  private session(): Promise<SshSession> {
    return connectSsh(this.target, this.options.trust, { timeouts: this.options.timeouts });
  }

  /** Runs `body` on the host's session; "cannot reach the host" becomes InstanceUnreachableError. */
  private async reachable<T>(body: (session: SshSession) => Promise<T>): Promise<T> {
    try {
      return await body(await this.session());
    } catch (err) {
      if (isHostUnreachable(err)) {
        throw new InstanceUnreachableError((err as Error).message, { cause: err });
      }
      throw err;
    }
  }

  private async script(session: SshSession, what: string, script: string, timeoutMs?: number, stdin?: Buffer): Promise<string[]> {
    const result: CommandResult = await session.exec(script, { timeoutMs, ...(stdin ? { stdin } : {}) });
    const words = resultOf(result.stdout);
    if (result.exitCode !== 0 || words === null) {
      throw new SshCommandError(this.host, what, result.exitCode, `${result.stderr}${result.stdout}`);
    }
    return words;
  }

  private async upload(session: SshSession, dir: string, files: Array<[string, string, number]>): Promise<void> {
    const nonce = randomBytes(6).toString('hex');
    await session.sftp(`upload the job files to ${dir}`, async (sftp) => {
      await Promise.all(
        files.map(async ([name, content, mode]) => {
          const tmp = `${dir}/.${name}.${nonce}`;
          await sftpCall<void>((cb) => sftp.writeFile(tmp, content, { mode }, cb));
          // posix-rename replaces atomically; plain SFTP rename refuses an existing target.
          await sftpCall<void>((cb) => sftp.ext_openssh_rename(tmp, `${dir}/${name}`, cb));
        }),
      );
    });
  }
}

function sftpCall<T>(call: (cb: (err: Error | null | undefined, value?: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => call((err, value) => (err ? reject(err) : resolve(value as T))));
}

const SFTP_NO_SUCH_FILE = 2;

/** Bytes [offset, offset+limit) of a remote file, fewer at its end; null when the file does not exist. */
async function readRange(sftp: SFTPWrapper, path: string, offset: number, limit: number): Promise<Buffer | null> {
  let handle: Buffer;
  try {
    handle = await sftpCall<Buffer>((cb) => sftp.open(path, 'r', cb));
  } catch (err) {
    if ((err as { code?: number }).code === SFTP_NO_SUCH_FILE) return null;
    throw err;
  }
  try {
    const buffer = Buffer.alloc(limit);
    let filled = 0;
    while (filled < limit) {
      const n = await new Promise<number>((resolve, reject) =>
        sftp.read(handle, buffer, filled, limit - filled, offset + filled, (err, bytesRead) => {
          // End of file is reported as an error with the SFTP EOF status.
          if (err) (err as { code?: number }).code === 1 ? resolve(0) : reject(err);
          else resolve(bytesRead);
        }),
      );
      if (n === 0) break;
      filled += n;
    }
    return buffer.subarray(0, filled);
  } finally {
    await sftpCall<void>((cb) => sftp.close(handle, cb)).catch(() => undefined);
  }
}

/** Bytes of `chunk` up to the last whole UTF-8 character (a chunk of only a broken sequence is taken as is). */
export function wholeCharacters(chunk: Buffer): number {
  const n = chunk.length;
  for (let back = 1; back <= Math.min(3, n); back += 1) {
    const byte = chunk[n - back] ?? 0;
    if ((byte & 0xc0) === 0x80) continue;
    const need = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return need > back && n - back > 0 ? n - back : n;
  }
  return n;
}
