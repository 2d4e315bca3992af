import { homedir } from 'node:os';
import { join } from 'node:path';
import { constants, mkdirSync } from 'node:fs';
import { appendFile, mkdir, open } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  NoCapacityError,
  SubmissionClosedError,
  type Backend,
  type ExecResult,
  type HeldRun,
  type Instance,
  type JobEndWatch,
  type JobStopFailure,
  type JobFiles,
  type JobProcessState,
  type JobRef,
  type LogChunk,
  type PeersFile,
  type ProvisionRequest,
  type Room,
  type RoomRequest,
} from '../backend';
import type { GroupPlan } from '../../plan/plan-schema';
import { renderEnvFile } from '../../runner/env-file';
import { JobLayout as L } from '../../runner/job-layout';
import { renderIsolatedLaunch, RESOLV_CONF } from '../../runner/isolated-launch';
import { renderJobWrapper } from '../../runner/job-wrapper';
import { hostNameOf, hostsFromBook, type NodeIdentity } from '../../runner/node-hosts';
import { SshLayout } from '../../runner/inter-node-ssh';
import { secretKeyFile } from '../../secrets/sealed-env';
import { codecKeyFile } from '../../codec/codec-keys';
import { parseSubnet, poolAddresses, subnetContains } from './address-pool';
import { claimDefaultSubnet } from './subnet-claims';
import { InstanceStore, type LocalInstanceRecord, type NetworkMode } from './instance-store';
import {
  claimForStop,
  readClaim,
  readExitCode,
  recordKilled,
  settledClaim,
  spawnWrapper,
  stopJobProcesses,
  KILLED_EXIT_CODE,
  type JobProcessTarget,
} from './job-process';
import { fleetWallPrefix, jobCgroupName, localInstanceId, nodeLinkNames, runWallKey, type NodeLinkNames } from './local-names';
import { cgroupPlan, jobLimits, noLimitsLine, outOfMemoryReason, pidsMaxFrom, type CgroupHierarchy, type JobLimits } from '../cgroup-limits';
import { cgroupHierarchy, createJobCgroup, jobCgroupsNamed, jobCgroupUsage, jobOomKills, removeJobCgroup } from './job-cgroup';
import { addToRunWall, firewallUnavailable, removeFromRunWall, removeWalls } from './firewall';
import { chooseNetworkMode } from './network-mode';
import { BRIDGE_ADDRESS, BRIDGE_SUBNET, ensureNodeNetwork, netnsAvailable, netnsInode, nodeNetworkReady, removeNodeNetwork, removeNodeNetworks } from './netns';
import { checkIsolationUsable, enterJobCommand, hiddenDirectories, isolationTools, readNamespaceInit, userEnv, type IsolationTools } from './job-isolation';
import { isolationWanted } from './isolation-mode';
import { execOnNode } from './node-exec';
import { jobConfinement } from './job-privileges';
import { noNewPrivsLine, type Confinement } from '../no-new-privs';
import { waitForSshServer, writeNodeSsh } from './node-ssh';
import { isAlive, type ProcessIdentity } from './proc';
import { ensureRunUser, lookupUser, removeRunUser, runUserName, type RunUser } from './run-user';
import { pathExists, readTextFile, writeFileAtomicSync, type FileOwner } from './state-files';
import { readPrepared, recordPrepared, type PreparedNode } from './node-preparation';
import { writePeersFile } from './peers-file';
import { keepOnly, keepOnlyAll, openJobFileForReading, setDirectoryOwner } from './job-dir-safety';
import { readLocalJobUsage } from './job-usage';
import { FolderWatch } from './folder-watch';
import { watchLocalJobEnds } from './job-ends';
import type { JobUsage } from '../job-usage';
import { mapLimit } from '../../concurrency/map-limit';
import { Slots } from '../../concurrency/slots';
import { retryFdShortage } from '../../concurrency/fd-shortage';

export interface LocalBackendOptions {
  /** Where instances, leases and job directories live; shared by the worker processes of this machine. */
  stateDir: string;
  /**
   * `netns`: a network namespace per node on the bridge trpl0 (root and `ip netns` needed), so
   * every node has its own 10.213.x.y and can listen on 0.0.0.0. `loopback`: a 127.x.y.z address
   * per node; nodes share the host's ports, so a node must bind its own address rather than
   * 0.0.0.0: `${{ groups[i].nodes[j].IP_ADDRESS }}` of itself, or line DSTACK_NODE_RANK+1 of
   * DSTACK_NODES_IPS (`sed -n "$((DSTACK_NODE_RANK + 1))p" <<< "$DSTACK_NODES_IPS"`).
   * `auto`: netns when available, else loopback.
   */
  network: 'netns' | 'loopback' | 'auto';
  /** Most instances at once (then provision() throws NoCapacityError); default: the whole subnet. */
  capacity?: number;
  /**
   * Addresses to hand out: inside 10.213.0.0/16 (netns) or 127.0.0.0/8 (loopback). Leases live in
   * `stateDir`, so fleets with different state directories on one machine need disjoint subnets;
   * the default is a /22 this fleet claims on the machine, first choice from its state directory's
   * path, kept in it (subnet-claims.ts).
   */
  subnet?: string;
  /** GPUs an instance reports to a job that asks for some (this machine's are not inspected); default 0. */
  gpus?: number;
  /** False: provision() takes one job per call (exercises the workflow's other path); default true. */
  groupProvisioning?: boolean;
  /** SIGTERM → SIGKILL grace when releaseRun() finds a job still running; default 5 s. */
  releaseGraceSeconds?: number;
  /**
   * Each job as its run's own unprivileged user, in its own mount and pid namespaces (job-isolation.ts).
   * Default: on as root unless TROUPE_LOCAL_ISOLATION=0; it needs root.
   */
  isolation?: boolean;
  /** Hidden from isolated jobs with its directory; default: the secret key file of this process (TROUPE_SECRET_KEY_FILE). */
  secretKeyFile?: string | null;
  /** Hidden the same way; default: the codec key file of this process (TROUPE_CODEC_KEY_FILE). */
  codecKeyFile?: string | null;
  /** Most processes (and threads) of one job at once, Troupe's own limit (cgroup-limits.ts); default TROUPE_LOCAL_PIDS_MAX, else DEFAULT_PIDS_MAX. */
  pidsMax?: number;
  /** The cgroup hierarchy jobs' limits go in; default: this machine's (cgroupHierarchy). `{ version: null, why }`: none, and each job's log says why. */
  cgroups?: CgroupHierarchy;
  /** What jobs run under: no_new_privs and a seccomp filter (job-privileges.ts); default: this machine's (jobConfinement). `{ walls: null, why }`: nothing, and each job's log says why. */
  confinement?: Confinement;
}

/** The default state directory of the local fleet (TROUPE_LOCAL_STATE_DIR overrides it). */
export function defaultLocalStateDir(): string {
  return process.env.TROUPE_LOCAL_STATE_DIR ?? join(homedir(), '.troupe', 'local');
}

/** Variables of the worker's environment a job inherits; the rest (credentials, tooling, root's PATH) stay out. */
const INHERITED_ENV = ['HOME', 'USER', 'LOGNAME', 'SHELL', 'LANG', 'LC_ALL', 'LC_CTYPE', 'TZ', 'TMPDIR'];
/** A job's own PATH (TROUPE_JOB_PATH on the worker overrides it; the task's env may set another): never the worker's, which names root's tool folders. */
export const JOB_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** Every process of a job inherits `TROUPE_INSTANCE_ID=<id>`: stopping finds the ones that left its group. */
const MARKER_NAME = 'TROUPE_INSTANCE_ID';
const CLAIM_WAIT_MS = 10_000;
/** Longest pause between two looks at a starting job's files when no change wakes the wait (a wrapper that died, no inotify). */
const FOLDER_LOOK_MS = 50;
/**
 * Jobs a per-job step of a whole batch (a release, a group's networks) works on at once: each
 * holds a file or a command open, and a thousand at once ran the worker out of descriptors.
 */
const JOBS_IN_FLIGHT = 32;

/** `fn` over every item, JOBS_IN_FLIGHT at a time, a moment without file descriptors waited out. */
function forEachJob<T, R>(items: readonly T[], fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  return mapLimit(items, JOBS_IN_FLIGHT, (item, i) => retryFdShortage(() => fn(item, i)));
}

/**
 * The local fleet: each node is a process group on this machine, in its own job directory, with its
 * own network namespace (or loopback address). All state is in files under `stateDir`, so several
 * worker processes can share the fleet and any of them can pick up a job another one started.
 */
export class LocalBackend implements Backend {
  readonly kind = 'local';
  readonly groupProvisioning: boolean;
  /** The local fleet is the machine of the worker that provisions. */
  readonly provisionsOnWorker = true;
  private readonly store: InstanceStore;
  /** Single stops (stopJob, releaseJob) that read and write job files at once, however many a caller asks for. */
  private readonly jobFiles = new Slots(JOBS_IN_FLIGHT);
  private modePromise: Promise<NetworkMode> | null = null;
  private modeErrorSaid = false;
  private readonly pools = new Map<NetworkMode, string[]>();
  /** The programs isolation runs, when jobs are isolated (looked up once). */
  private readonly isolation: { tools: () => IsolationTools } | null;
  private readonly pidsMax: number;

  constructor(private readonly options: LocalBackendOptions) {
    this.pidsMax = options.pidsMax ?? pidsMaxFrom(process.env);
    this.store = new InstanceStore(options.stateDir);
    this.groupProvisioning = options.groupProvisioning ?? true;
    const isolate = options.isolation ?? isolationWanted();
    if (isolate && process.getuid?.() !== 0) throw new Error('local fleet: isolating jobs needs root (or isolation: false)');
    let tools: IsolationTools | null = null;
    this.isolation = isolate ? { tools: () => (tools ??= isolationTools()) } : null;
    if (options.capacity !== undefined && !(Number.isInteger(options.capacity) && options.capacity >= 0)) {
      throw new Error(`local fleet: capacity must be a whole number ≥ 0, not ${options.capacity}`);
    }
    // A subnet that cannot be parsed is refused here, at the worker's start, not at a run's first node.
    if (options.subnet !== undefined) parseSubnet(options.subnet);
  }

  /** The network mode in use (`auto` resolved). */
  networkMode(): Promise<NetworkMode> {
    this.modePromise ??= this.resolveMode();
    return this.modePromise;
  }

  private async resolveMode(): Promise<NetworkMode> {
    const wanted = this.options.network;
    return await chooseNetworkMode(wanted, wanted !== 'loopback' && (await netnsAvailable()), firewallUnavailable);
  }

  /** The addresses the fleet hands out in this mode (computed once: a /16 has 65,534). */
  private pool(mode: NetworkMode): string[] {
    let pool = this.pools.get(mode);
    if (!pool) {
      pool = localPool(mode, this.options.subnet ?? claimDefaultSubnet(mode, this.options.stateDir), this.options.capacity ?? null);
      this.pools.set(mode, pool);
    }
    return pool;
  }

  jobDirectory(job: JobRef): string {
    return this.store.jobDir(job.run_id, job.submission, job.job_name, job.attempt);
  }

  async provision(req: ProvisionRequest): Promise<Instance[]> {
    if (!this.groupProvisioning && req.jobs.length !== 1) {
      throw new Error(`local fleet without group provisioning takes one job per call, got ${req.jobs.length}`);
    }
    await this.refuseReleased(req.run_id, req.submission);
    if (req.run_workflow_id) await this.store.recordOwner({ run_workflow_id: req.run_workflow_id, run_id: req.run_id, submission: req.submission });
    const mode = await this.networkMode();
    const pool = this.pool(mode);
    const gpus = this.gpusFor(req.group);
    const existing = await forEachJob(req.jobs, (job) => this.store.readRecord(localInstanceId(req.run_id, req.submission, job.job_num, job.attempt)));
    const owners = req.jobs.flatMap((job, i) =>
      existing[i] ? [] : [{ instance_id: localInstanceId(req.run_id, req.submission, job.job_num, job.attempt), run_id: req.run_id, submission: req.submission }],
    );
    // All or nothing: a half-placed batch would hold addresses while it waits for capacity.
    const leases = owners.length > 0 ? await this.store.leaseAddresses(owners, pool) : new Map<string, string>();
    if (!leases) {
      const free = await this.store.freeAddresses(pool);
      throw new NoCapacityError(
        `the local fleet is full: ${pool.length} instance${pool.length === 1 ? '' : 's'} at most, ${free} free, ` +
          `${owners.length} wanted for group ${req.group.name} (troupe worker --local-subnet / --local-capacity set its size)`,
      );
    }
    const records = await forEachJob(req.jobs, async (job, i): Promise<LocalInstanceRecord> => {
      const found = existing[i];
      if (found) return found;
      const instanceId = localInstanceId(req.run_id, req.submission, job.job_num, job.attempt);
      const ip = leases.get(instanceId) as string;
      const names: NodeLinkNames | null = mode === 'netns' ? nodeLinkNames(instanceId) : null;
      const candidate: LocalInstanceRecord = {
        instance_id: instanceId,
        run_id: req.run_id,
        submission: req.submission,
        job_num: job.job_num,
        job_name: job.job_name,
        ...(job.attempt ? { attempt: job.attempt } : {}),
        ip,
        gpus,
        mode,
        netns: names?.netns ?? null,
        host_link: names?.hostLink ?? null,
        node_link: names?.nodeLink ?? null,
        job_dir: this.store.jobDir(req.run_id, req.submission, job.job_name, job.attempt),
        shm_size_gb: req.group.resources.shm_size,
        limits: jobLimits(req.group.resources, this.pidsMax),
      };
      const record = await this.store.createRecord(candidate);
      // A concurrent call for the same job won with another address: give ours back.
      if (record !== candidate && record.ip !== ip) await this.store.releaseAddress(ip, instanceId);
      return record;
    });
    // The wall first: a node's port is on the bridge only once its run's rules hold it. The rules
    // name ports (not interfaces that must exist), so the namespaces are made meanwhile, and each
    // port joins the bridge once the wall is up.
    const walled = records.flatMap((r) => (r.host_link ? [{ port: r.host_link, address: r.ip }] : []));
    const wall = walled.length > 0 ? addToRunWall(runWallKey(this.options.stateDir, req.run_id, req.submission), walled) : Promise.resolve();
    await Promise.all([
      wall,
      forEachJob(records, async (record) => {
        const names = linkNames(record);
        if (names) await ensureNodeNetwork(names, record.ip, () => wall);
      }),
      ...(this.isolation
        ? [checkIsolationUsable(this.isolation.tools()), ensureRunUser(runUserName(req.run_id, req.submission)).then(() => undefined)]
        : []),
    ]);
    // releaseRun() may have run meanwhile: undo what this call set up, then refuse.
    if (await this.store.isReleased(req.run_id, req.submission)) {
      if (walled.length > 0) await this.removeWalls(req.run_id, req.submission);
      await forEachJob(records, (record) => this.forget(record));
      await this.removeRunUserOf(req.run_id, req.submission);
      await this.refuseReleased(req.run_id, req.submission);
    }
    return records.map(toInstance);
  }

  /** One node takes one address of the fleet's pool (and GPUs it reports, when its group needs some). */
  async room({ group, count }: RoomRequest): Promise<Room> {
    const fleet = 'the local fleet';
    try {
      this.gpusFor(group);
    } catch (err) {
      if (err instanceof NoCapacityError) return { fleet, fits: 0, reason: err.message };
      throw err;
    }
    const pool = this.pool(await this.networkMode());
    const free = await this.store.freeAddresses(pool);
    if (free >= count) return { fleet, fits: count, reason: null };
    return { fleet, fits: free, reason: `it holds ${pool.length} node${pool.length === 1 ? '' : 's'} at most, ${pool.length - free} taken` };
  }

  private gpusFor(group: GroupPlan): number {
    const { min, max } = group.resources.gpu.count;
    if (!min) return 0;
    const have = Math.min(this.options.gpus ?? 0, max ?? Number.POSITIVE_INFINITY);
    if (have < min) {
      throw new NoCapacityError(
        `the local fleet has ${this.options.gpus ?? 0} GPUs per instance; group ${group.name} needs at least ${min}`,
      );
    }
    return have;
  }

  private async refuseReleased(runId: string, submission: number): Promise<void> {
    if (await this.store.isReleased(runId, submission)) {
      throw new SubmissionClosedError(`submission ${submission} of run ${runId} was released; it cannot take instances any more`);
    }
  }

  /** Ready once its network is; meanwhile the node is set up for its start (prepareNode), once. */
  async runnerReady(job: JobRef): Promise<boolean> {
    if (await this.store.isReleased(job.run_id, job.submission)) return false;
    const record = await this.store.readRecord(job.instance.instance_id);
    if (!record) return false;
    const names = linkNames(record);
    const [ready] = await Promise.all([names ? nodeNetworkReady(names, record.ip) : true, this.prepareAhead(job, record)]);
    return ready;
  }

  /**
   * The node's set-up for its start, ahead of it (node-preparation.ts), unless it is recorded.
   * A release or a stop of the job that came meanwhile may have cleaned up before it: then what
   * it made goes again (a release marks the submission, a stop claims the start, and a forget
   * removes the record before they clean up, so one seen after it cleans up after it too).
   */
  private async prepareAhead(job: JobRef, record: LocalInstanceRecord): Promise<void> {
    const dir = this.jobDirectory(job);
    if (readPrepared(dir, this.isolation !== null)) return;
    // What the jobs run under is looked at once per worker: its first start need not.
    await Promise.all([this.prepareNode(job, record, dir), this.options.confinement ?? jobConfinement()]);
    const [released, still, claim] = await Promise.all([
      this.store.isReleased(job.run_id, job.submission),
      this.store.readRecord(record.instance_id),
      readClaim(dir),
    ]);
    if (!released && still && claim.kind !== 'stopped') return;
    const h = await this.cgroups();
    if (h.version !== null) await removeJobCgroup(h, jobCgroupName(this.options.stateDir, record.instance_id));
    await keepOnly(dir, RELEASED_JOB_FILES);
  }

  /**
   * What a start needs that none of its job's files do (node-preparation.ts): the job directory,
   * the run's user and, when isolated, the directory's owners, `work/` and what the job must not
   * see; the cgroup with its limits. Idempotent; recorded last.
   */
  private async prepareNode(job: JobRef, record: LocalInstanceRecord, dir: string): Promise<PreparedNode> {
    await mkdir(dir, { recursive: true });
    const user = this.isolation ? await ensureRunUser(runUserName(job.run_id, job.submission)) : null;
    // The cgroup is made while the directories are set up: each is a chain of file-system calls.
    const [cgroup, hide] = await Promise.all([this.jobCgroup(record), user ? this.isolatedDirectories(dir, user) : null]);
    const prepared: PreparedNode = { user, cgroup_why: 'why' in cgroup ? cgroup.why : null, hide };
    recordPrepared(dir, prepared);
    return prepared;
  }

  /**
   * An isolated job's directory: root's, readable by the run's group (0750), `work/` the run
   * user's; returns what the job must not see (hiddenDirectories: after the owners are set, since
   * it looks at which ancestors the run's user can traverse).
   */
  private async isolatedDirectories(dir: string, user: RunUser): Promise<string[]> {
    setDirectoryOwner(join(dir, '..'), { uid: 0, gid: user.gid }, 0o750);
    setDirectoryOwner(dir, { uid: 0, gid: user.gid }, 0o750);
    const work = join(dir, L.workDir);
    mkdirSync(work, { recursive: true });
    setDirectoryOwner(work, user, 0o700);
    const keyFiles = [
      this.options.secretKeyFile === undefined ? secretKeyFile() : this.options.secretKeyFile,
      this.options.codecKeyFile === undefined ? codecKeyFile() : this.options.codecKeyFile,
    ];
    return await hiddenDirectories(dir, this.options.stateDir, keyFiles);
  }

  async startJob(job: JobRef, files: JobFiles): Promise<{ pid: number }> {
    const dir = this.jobDirectory(job);
    const claim = await readClaim(dir);
    if (claim.kind === 'none') {
      const [, record] = await Promise.all([this.refuseReleased(job.run_id, job.submission), this.store.readRecord(job.instance.instance_id)]);
      if (!record) throw new Error(`${job.job_name}: instance ${job.instance.instance_id} is not provisioned on the local fleet`);
      // Set up when its runner was found ready (prepareAhead), or now if that was not recorded.
      const prepared = readPrepared(dir, this.isolation !== null) ?? (await this.prepareNode(job, record, dir));
      const confinement = this.options.confinement ?? (await jobConfinement());
      const walls = confinement.walls ?? [];
      const isolated = await this.writeJobFiles(dir, record, files, prepared, walls);
      const cgroupProcs = prepared.cgroup_why === null ? await this.cgroupProcsOf(record) : [];
      // What the job runs without: its log's first lines, limits first.
      const without = [...(prepared.cgroup_why !== null ? [noLimitsLine(prepared.cgroup_why)] : []), ...(confinement.walls ? [] : [noNewPrivsLine(confinement.why)])];
      if (without.length > 0) await appendFile(join(dir, L.log), without.join(''));
      // An isolated job's walls go up after its namespaces are set up (isolate.sh), not around the wrapper.
      const spawned = spawnWrapper(dir, { netns: record.netns, env: this.baseEnv(record), cgroupProcs, confine: isolated ? [] : walls });
      return await this.removeEnvIfRefused(dir, this.waitForStart(job, dir, spawned.exited));
    }
    return await this.waitForStart(job, dir, null);
  }

  /**
   * A start that lost to a stop or a release leaves nothing of its own behind (the env may hold
   * secrets, `ssh/` the run's keys): the commands never ran, so only what a stop keeps stays.
   */
  private async removeEnvIfRefused<T>(dir: string, started: Promise<T>): Promise<T> {
    try {
      return await started;
    } catch (err) {
      if (err instanceof SubmissionClosedError) await keepOnly(dir, RELEASED_JOB_FILES);
      throw err;
    }
  }

  /**
   * The job's files (and its `ssh/` for inter-node SSH); the isolated launch's too when jobs are
   * isolated, whose wrapper then runs it (returned). Written by atomic replacement: a wrapper that
   * already won (a concurrent start) keeps reading the old inode. Synchronously but for peers.json
   * (writeFileAtomicSync says why); the directories are the node's set-up (prepareNode).
   */
  private async writeJobFiles(
    dir: string,
    record: LocalInstanceRecord,
    files: JobFiles,
    prepared: PreparedNode,
    walls: readonly string[],
  ): Promise<{ launch: string; unshare: string } | null> {
    const { user } = prepared;
    // Readable by the run's group (its user), not by other runs' users; the scripts that run as root are root's alone.
    const shared: FileOwner | null = user ? { uid: 0, gid: user.gid } : null;
    // Inter-node SSH needs a port 22 of the node's own: netns mode only (node-ssh.ts).
    const entry = files.ssh && record.netns ? writeNodeSsh(dir, record.ip, files.ssh, user) : undefined;
    const isolated = user ? this.isolatedLaunch(dir, record, user, prepared.hide ?? [], entry, files.node ?? null, walls) : null;
    writeFileAtomicSync(join(dir, L.env), renderEnvFile(files.env), user ? 0o640 : 0o600, shared);
    writeFileAtomicSync(join(dir, L.hostfile), files.hostfile, user ? 0o640 : 0o644, shared);
    writeFileAtomicSync(join(dir, L.launchScript), files.script, user ? 0o750 : 0o755, shared);
    if (isolated) writeFileAtomicSync(join(dir, L.isolatedLaunch), isolated.launch, 0o700);
    if (isolated && files.node) writeFileAtomicSync(join(dir, L.hosts), files.node.hosts, 0o644);
    if (isolated && record.netns) writeFileAtomicSync(join(dir, L.resolvConf), RESOLV_CONF, 0o644);
    writeFileAtomicSync(join(dir, L.wrapper), renderJobWrapper(isolated ? { isolate: { unshare: isolated.unshare } } : { entry }), user ? 0o700 : 0o755);
    if (files.peers) await writePeersFile(dir, files.peers, peersMode(user), shared);
    return isolated;
  }

  /**
   * The script that sets up an isolated job's namespaces (renderIsolatedLaunch): a machine of its
   * own, named and with the /etc/hosts of `node` (the runner's), /dev/shm of the group's shm_size,
   * without the directories in `hide`.
   */
  private isolatedLaunch(
    dir: string,
    record: LocalInstanceRecord,
    user: RunUser,
    hide: string[],
    entry: string | undefined,
    node: NodeIdentity | null,
    walls: readonly string[],
  ): { launch: string; unshare: string } {
    const tools = this.requireIsolation().tools();
    const launch = renderIsolatedLaunch({
      jobDir: dir,
      hide,
      user,
      ownNetwork: record.netns !== null,
      node: node ? { hostname: node.hostname, hostsFile: L.hosts } : null,
      shmBytes: record.shm_size_gb ? Math.round(record.shm_size_gb * 1024 ** 3) : null,
      tools,
      entry,
      confine: walls,
    });
    return { launch, unshare: tools.unshare };
  }

  /**
   * Makes the job's cgroup with its limits; the files its wrapper joins it by. Where this machine
   * has no usable hierarchy (or the kernel refuses the cgroup: a v2 tree whose root holds processes,
   * in a container), the job runs without limits, and `why` is the first line of its log.
   */
  private async jobCgroup(record: LocalInstanceRecord): Promise<{ procs: string[] } | { procs: []; why: string }> {
    const h = await this.cgroups();
    if (h.version === null) return { procs: [], why: h.why };
    const name = jobCgroupName(this.options.stateDir, record.instance_id);
    try {
      return { procs: await retryFdShortage(() => createJobCgroup(h, name, this.limitsOf(record))) };
    } catch (err) {
      await removeJobCgroup(h, name).catch(() => undefined);
      return { procs: [], why: err instanceof Error ? err.message : String(err) };
    }
  }

  /** The same for a probe: none where the machine cannot apply it (the job's log said so at its start). */
  private async probeWalls(): Promise<readonly string[]> {
    return (this.options.confinement ?? (await jobConfinement())).walls ?? [];
  }

  private async cgroups(): Promise<CgroupHierarchy> {
    return this.options.cgroups ?? (await cgroupHierarchy());
  }

  /** The files a process enters the job's cgroup by (none without a hierarchy). */
  private async cgroupProcsOf(record: LocalInstanceRecord): Promise<string[]> {
    const h = await this.cgroups();
    return h.version === null ? [] : cgroupPlan(h, jobCgroupName(this.options.stateDir, record.instance_id), this.limitsOf(record)).procs;
  }

  private limitsOf(record: LocalInstanceRecord): JobLimits {
    return record.limits ?? { memory_bytes: null, cpus: null, pids: this.pidsMax };
  }

  /** Why a job that exited with `code` ended, when its cgroup counted an OOM kill (null otherwise, or once it is removed). */
  private async exitReason(job: JobRef, code: number): Promise<string | null> {
    if (code === 0) return null;
    const h = await this.cgroups();
    const record = h.version === null ? null : await this.store.readRecord(job.instance.instance_id);
    if (h.version === null || !record) return null;
    const limits = this.limitsOf(record);
    const kills = await jobOomKills(h, jobCgroupName(this.options.stateDir, record.instance_id), limits);
    return kills ? outOfMemoryReason(limits.memory_bytes) : null;
  }

  private requireIsolation(): { tools: () => IsolationTools } {
    if (!this.isolation) throw new Error('local fleet: jobs are not isolated here');
    return this.isolation;
  }

  private baseEnv(record: LocalInstanceRecord): Record<string, string> {
    const env: Record<string, string> = {};
    for (const name of INHERITED_ENV) {
      const value = process.env[name];
      if (value !== undefined) env[name] = value;
    }
    env.PATH = process.env.TROUPE_JOB_PATH || JOB_PATH;
    env[MARKER_NAME] = record.instance_id;
    return env;
  }

  /** The pid of whichever wrapper won the claim; refuses a job that a stop claimed first. */
  private async waitForStart(job: JobRef, dir: string, wrapperExited: Promise<number | null> | null): Promise<{ pid: number }> {
    let exitCode: number | null = null;
    const deadline = Date.now() + CLAIM_WAIT_MS;
    // What the wrapper writes (its claim and pid, then isolate.sh's ns_init, then the node's SSH
    // server its pid file) is waited for by inotify on those folders: looked at when they change.
    // The SSH server's folder only when the node has one: a folder never made would keep the
    // looks at FOLDER_LOOK_MS (folder-watch.ts).
    const ssh = await pathExists(join(dir, SshLayout.dir, SshLayout.run));
    const folders = new FolderWatch([dir, join(dir, L.started), ...(ssh ? [join(dir, SshLayout.dir, SshLayout.state)] : [])]);
    void wrapperExited?.then((code) => {
      exitCode = code;
      folders.nudge();
    });
    try {
      for (;;) {
        const claim = await readClaim(dir);
        if (claim.kind === 'started') {
          if (this.isolation) await this.waitForNamespaces(dir, claim.leader, folders);
          if (ssh) await waitForSshServer(dir, claim.leader, CLAIM_WAIT_MS, folders);
          return { pid: claim.leader.pid };
        }
        if (claim.kind === 'stopped') {
          throw new SubmissionClosedError(`${job.job_name} was stopped before it started; it will not start any more`);
        }
        // Our wrapper ended without anyone claiming: it could not start (its log says why).
        if (claim.kind === 'none' && exitCode !== null) {
          throw new Error(`${job.job_name}: the job wrapper exited with ${exitCode} before starting; see ${join(dir, L.wrapperLog)}`);
        }
        if (Date.now() > deadline) throw new Error(`${job.job_name}: no process recorded in ${dir} after ${CLAIM_WAIT_MS / 1000}s`);
        await folders.changed(FOLDER_LOOK_MS);
      }
    } finally {
      folders.close();
    }
  }

  /**
   * An isolated job runs its commands once its namespaces are set up (`started/ns_init`, a few ms
   * after its wrapper's pid): until then it is not RUNNING. A job that ended first (it could not
   * be isolated: its log says why) is left to the watch, which reports its exit.
   */
  private async waitForNamespaces(dir: string, leader: ProcessIdentity, folders: FolderWatch): Promise<void> {
    const deadline = Date.now() + CLAIM_WAIT_MS;
    while (!(await pathExists(join(dir, L.started, L.nsInit))) && Date.now() < deadline) {
      if (!(await isAlive(leader))) return;
      await folders.changed(FOLDER_LOOK_MS);
    }
  }

  async jobState(job: JobRef): Promise<JobProcessState> {
    const dir = this.jobDirectory(job);
    const claim = await settledClaim(dir, 2_000);
    if (claim.kind !== 'started') return { state: 'absent' };
    const { pid } = claim.leader;
    let code = await readExitCode(dir);
    if (code === null) {
      if (await isAlive(claim.leader)) return { state: 'running', pid };
      // It may have written its code just after the first look.
      code = (await readExitCode(dir)) ?? KILLED_EXIT_CODE;
    }
    const reason = await this.exitReason(job, code);
    return { state: 'exited', pid, exit_code: code, ...(reason ? { reason } : {}) };
  }

  /** Ends pushed by the spawn helper (job-ends.ts): a running job costs no check until its wrapper exits. */
  watchEnds(jobs: JobRef[], pollMs: number, changed: (jobNums: number[]) => void): JobEndWatch {
    return watchLocalJobEnds(
      jobs.map((job) => ({ job_num: job.job_num, dir: this.jobDirectory(job) })),
      pollMs,
      changed,
    );
  }

  async usage(job: JobRef): Promise<JobUsage | null> {
    const claim = await readClaim(this.jobDirectory(job));
    if (claim.kind !== 'started') return null;
    const [h, record] = await Promise.all([this.cgroups(), this.store.readRecord(job.instance.instance_id)]);
    if (h.version === null || !record) return await readLocalJobUsage(claim.leader, null);
    const name = jobCgroupName(this.options.stateDir, record.instance_id);
    const limits = this.limitsOf(record);
    return await readLocalJobUsage(claim.leader, { read: () => jobCgroupUsage(h, name, limits), memory_limit_bytes: limits.memory_bytes });
  }

  async stopJob(job: JobRef, graceSeconds: number): Promise<void> {
    const record = await this.store.readRecord(job.instance.instance_id);
    await this.stopJobIn(this.jobDirectory(job), job.instance.instance_id, record, graceSeconds);
  }

  /** All at once: the stops share their rounds and one scan of /proc (stopClaimed), not a scan per batch of stopJob calls. */
  async stopJobs(jobs: readonly JobRef[], graceSeconds: number): Promise<JobStopFailure[]> {
    const failures: JobStopFailure[] = [];
    const stops: { job: JobRef; claimed: ClaimedStop }[] = [];
    const claim = async (job: JobRef) => await this.claimToStop(this.jobDirectory(job), job.instance.instance_id, await this.store.readRecord(job.instance.instance_id));
    // Every job tried: one whose claim fails is named, the others are stopped.
    await mapLimit(jobs, JOBS_IN_FLIGHT, (job) =>
      retryFdShortage(() => claim(job)).then(
        (claimed) => void (claimed && stops.push({ job, claimed })),
        (error: unknown) => void failures.push({ job, error }),
      ),
    );
    const failed = await this.stopClaimed(
      stops.map((s) => s.claimed),
      graceSeconds,
    );
    for (const f of failed) {
      const stop = stops[f.index];
      if (stop) failures.push({ job: stop.job, error: f.error });
    }
    return failures;
  }

  private async stopJobIn(dir: string, instanceId: string, record: LocalInstanceRecord | null, graceSeconds: number): Promise<void> {
    const claimed = await this.jobFiles.with(() => retryFdShortage(() => this.claimToStop(dir, instanceId, record)));
    const [failed] = claimed ? await this.stopClaimed([claimed], graceSeconds) : [];
    if (failed) throw failed.error;
  }

  /** Takes the job's start claim for a stop; what is left to stop, if its commands had started (or were starting). */
  private async claimToStop(dir: string, instanceId: string, record: LocalInstanceRecord | null): Promise<ClaimedStop | null> {
    if (await claimForStop(dir)) return null;
    const claim = await settledClaim(dir, CLAIM_WAIT_MS);
    if (claim.kind === 'stopped') return null;
    const target: JobProcessTarget = {
      leader: claim.kind === 'started' ? claim.leader : null,
      marker: `${MARKER_NAME}=${instanceId}`,
      netnsInode: record?.netns ? await netnsInode(record.netns) : null,
      cgroupProcs: record ? ((await this.cgroupProcsOf(record))[0] ?? null) : null,
    };
    return { dir, target, started: claim.kind === 'started' };
  }

  /**
   * Stops the claimed jobs' processes, all at once: their stops share their rounds and scans of
   * /proc (stopJobProcesses). Each settles on its own; the ones that failed, by index.
   */
  private async stopClaimed(claimed: readonly ClaimedStop[], graceSeconds: number): Promise<{ index: number; error: unknown }[]> {
    const settled = await Promise.allSettled(claimed.map((c) => stopJobProcesses(c.target, graceSeconds * 1000)));
    await forEachJob(
      claimed.filter((c, i) => c.started && settled[i]?.status === 'fulfilled'),
      (c) => recordKilled(c.dir),
    );
    return settled.flatMap((r, index) => (r.status === 'rejected' ? [{ index, error: r.reason as unknown }] : []));
  }

  async releaseRun(runId: string, submission: number): Promise<void> {
    await this.store.markReleased(runId, submission);
    const records = await this.store.listRecords(runId, submission);
    const grace = this.options.releaseGraceSeconds ?? 5;
    const claimed = await forEachJob(records, (r) => this.claimToStop(r.job_dir, r.instance_id, r));
    const [failed] = await this.stopClaimed(
      claimed.filter((c): c is ClaimedStop => c !== null),
      grace,
    );
    if (failed) throw failed.error;
    // Nothing secret stays at rest: of every job directory of the submission (whether or not its
    // record is still there) only RELEASED_JOB_FILES stay. The files (rm, on the disk) go beside
    // the user, the wall and the namespaces (the kernel's); all before the records: a worker
    // killed in between leaves records, so the reaper comes back.
    const jobDirs = await this.store.jobDirs(runId, submission);
    const done = await Promise.allSettled([
      keepOnlyAll(jobDirs, RELEASED_JOB_FILES),
      (async () => {
        await this.removeRunUserOf(runId, submission);
        if (records.some((r) => r.netns)) await this.removeWalls(runId, submission);
        // The namespaces in a few `ip` processes; forget() then finds them gone (or finishes the job).
        await removeNodeNetworks(records.flatMap((r) => linkNames(r) ?? []));
      })(),
    ]);
    for (const d of done) if (d.status === 'rejected') throw d.reason;
    await forEachJob(records, (record) => this.forget(record));
    for (const orphan of await this.store.orphanLeases(runId, submission)) {
      await this.store.releaseAddress(orphan.ip, orphan.instance_id);
    }
    await this.store.removeOrphanedTemps();
  }

  /**
   * Submissions whose run is recorded (provisioned by a run) and that are not released yet, or
   * whose release did not finish (instance records left): what the worker's reaper looks at.
   */
  async heldRuns(): Promise<HeldRun[]> {
    // A wall that cannot be listed or removed now does not keep the reaper from the runs it holds.
    await this.reconcileWalls().catch((err: unknown) => console.error(`local fleet: ${err instanceof Error ? err.message : String(err)}`));
    await this.reconcileCgroups().catch((err: unknown) => console.error(err instanceof Error ? err.message : String(err)));
    const [owners, records] = await Promise.all([this.store.owners(), this.store.allRecords()]);
    const held: HeldRun[] = [];
    for (const owner of owners) {
      const nodes = records.filter((r) => r.run_id === owner.run_id && r.submission === owner.submission).length;
      if (nodes === 0 && (await this.store.isReleased(owner.run_id, owner.submission))) continue;
      held.push({ ...owner, holds: `${nodes} node${nodes === 1 ? '' : 's'} on the local fleet` });
    }
    return held;
  }

  /**
   * One job attempt's instance given back (a replaced or removed node): its processes stopped (the
   * start claimed, so a late start never runs), its directory reduced to what releaseRun keeps,
   * its namespace, address and record gone. The run's user stays: the other jobs run as it.
   */
  async releaseJob(job: JobRef, graceSeconds: number): Promise<void> {
    const dir = this.jobDirectory(job);
    const record = await this.store.readRecord(job.instance.instance_id);
    await this.stopJobIn(dir, job.instance.instance_id, record, graceSeconds);
    await keepOnly(dir, RELEASED_JOB_FILES);
    if (!record) return;
    await this.forget(record);
    // Once its link is gone (no moment without the wall); the run's other nodes keep theirs.
    if (record.host_link) await removeFromRunWall(runWallKey(this.options.stateDir, record.run_id, record.submission), { port: record.host_link, address: record.ip });
  }

  /**
   * Replaces the job's peers.json (writePeersFile: atomic, never by an older version), with the
   * modes of its other files: readable by its run's group when isolated, and then its /etc/hosts
   * too (refreshHosts). A released job (no instance record, or no run user any more) is left alone.
   */
  async writePeers(job: JobRef, peers: PeersFile): Promise<void> {
    const dir = this.jobDirectory(job);
    if (!(await this.store.readRecord(job.instance.instance_id)) || !(await pathExists(dir))) return;
    let shared: FileOwner | null = null;
    if (this.isolation) {
      const user = await lookupUser(runUserName(job.run_id, job.submission));
      if (!user) return;
      shared = { uid: 0, gid: user.gid };
    }
    await writePeersFile(dir, peers, peersMode(shared), shared, shared ? () => refreshHosts(dir, peers.json) : undefined);
  }

  /**
   * The submission's user, if one exists: also when isolation is off in this worker (another
   * worker, or an earlier one, may have run the jobs isolated).
   */
  private async removeRunUserOf(runId: string, submission: number): Promise<void> {
    if (process.getuid?.() !== 0) return;
    await removeRunUser(runUserName(runId, submission));
  }

  /**
   * The fleet's walls left by a worker killed mid-way (runs of this fleet with no instance record
   * left), and the given submission's wall. Walls of other fleets (state directories) on the
   * machine are theirs to keep.
   */
  private async removeWalls(runId?: string, submission?: number): Promise<void> {
    const own = fleetWallPrefix(this.options.stateDir);
    const asked = runId !== undefined && submission !== undefined ? runWallKey(this.options.stateDir, runId, submission) : null;
    await removeWalls(async () => {
      const live = new Set((await this.store.allRecords()).map((r) => runWallKey(this.options.stateDir, r.run_id, r.submission)));
      return (key) => key === asked || (key.startsWith(own) && !live.has(key));
    });
  }

  /**
   * At the reaper's passes (the first at the worker's start): in netns mode, the walls a killed
   * worker left; without nftables, says so once (provisioning refuses with the same line).
   */
  private async reconcileWalls(): Promise<void> {
    let mode: NetworkMode;
    try {
      mode = await this.networkMode();
    } catch (err) {
      if (!this.modeErrorSaid) console.error(err instanceof Error ? err.message : String(err));
      this.modeErrorSaid = true;
      return;
    }
    if (mode === 'netns') await this.removeWalls();
  }

  /** At the reaper's passes: cgroups of this fleet whose instance record is gone (a worker killed between the two). */
  private async reconcileCgroups(): Promise<void> {
    const h = await this.cgroups();
    if (h.version === null) return;
    // Cgroups first: a job's record is written before its cgroup, so one listed here without a record listed after has none.
    const names = await jobCgroupsNamed(h, fleetWallPrefix(this.options.stateDir));
    const live = new Set((await this.store.allRecords()).map((r) => jobCgroupName(this.options.stateDir, r.instance_id)));
    for (const name of names) if (!live.has(name)) await removeJobCgroup(h, name);
  }

  /** Removes an instance: its cgroup (what is left in it killed), its namespace and links, its address lease, its record. */
  private async forget(record: LocalInstanceRecord): Promise<void> {
    const h = await this.cgroups();
    if (h.version !== null) await removeJobCgroup(h, jobCgroupName(this.options.stateDir, record.instance_id));
    const names = linkNames(record);
    if (names) await removeNodeNetwork(names);
    await this.store.releaseAddress(record.ip, record.instance_id);
    await this.store.removeRecord(record.instance_id);
  }

  /**
   * Runs a probe where the job runs: in its namespace (netns mode), in its directory with its
   * environment (job.env, once the job was started), so `$DSTACK_*` work in the script.
   */
  async exec(job: JobRef, script: string, timeoutMs: number): Promise<ExecResult> {
    const record = await this.store.readRecord(job.instance.instance_id);
    if (!record) return { exit_code: 127, output: `instance ${job.instance.instance_id} is not on the local fleet (released?)` };
    const dir = this.jobDirectory(job);
    if (this.isolation) return await this.execIsolated(job, record, dir, script, timeoutMs);
    const started = await pathExists(join(dir, L.env));
    const withEnv = started ? `. ./${L.env} || exit 126\n${script}` : script;
    const env = this.baseEnv(record);
    delete env[MARKER_NAME];
    // Once started, in the job's cgroup (made before its files): the probe is the task's code.
    const cgroupProcs = started ? await this.cgroupProcsOf(record) : [];
    return await execOnNode(withEnv, { netns: record.netns, cwd: started ? dir : '/', env, timeoutMs, cgroupProcs, confine: await this.probeWalls() });
  }

  /**
   * A probe of an isolated job runs where its commands do: in its namespaces (mount, pid,
   * network), as its run's user, with its environment. Before the job runs there is nowhere to
   * run it (never as root: a `ready.command` is the task's code).
   */
  private async execIsolated(job: JobRef, record: LocalInstanceRecord, dir: string, script: string, timeoutMs: number): Promise<ExecResult> {
    const tools = this.requireIsolation().tools();
    const claim = await readClaim(dir);
    const init = claim.kind === 'started' ? await readNamespaceInit(dir, 2_000) : null;
    const user = init ? await lookupUser(runUserName(job.run_id, job.submission)) : null;
    if (!init || !user) return { exit_code: 1, output: `${job.job_name} is not running` };
    const env = { ...this.baseEnv(record), ...userEnv(dir, user) };
    delete env[MARKER_NAME];
    const cgroupProcs = await this.cgroupProcsOf(record);
    const enter = [...enterJobCommand(tools, init, dir, user), ...(await this.probeWalls())];
    return await execOnNode(`. ./${L.env} || exit 126\n${script}`, { netns: null, enter, cwd: '/', env, timeoutMs, cgroupProcs });
  }

  async readLog(job: JobRef, offset: number, limitBytes: number): Promise<LogChunk> {
    const handle = await openJobFileForReading(join(this.jobDirectory(job), L.log));
    if (!handle) return { data: '', next_offset: offset };
    try {
      const buffer = Buffer.alloc(Math.max(0, limitBytes));
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, offset);
      const length = wholeCharacters(buffer.subarray(0, bytesRead));
      return { data: buffer.subarray(0, length).toString('utf8'), next_offset: offset + length };
    } finally {
      await handle.close();
    }
  }
}

/**
 * What stays of a released job's directory: the log and exit code (for `troupe logs`, as on SSH
 * hosts) and the start record (pids and times), so the job's end still reads as it was.
 */
const RELEASED_JOB_FILES = [L.log, L.exitCode, L.started];

/** A job whose start claim a stop took while its commands ran (or were starting): its processes are left to stop. */
interface ClaimedStop {
  dir: string;
  target: JobProcessTarget;
  started: boolean;
}

/** peers.json: readable by the run's group when the job is isolated (root's otherwise, like its hostfile). */
function peersMode(owner: unknown): number {
  return owner ? 0o640 : 0o644;
}

/**
 * An isolated job's /etc/hosts from a newer address book: written in place (the job's mount
 * namespace binds this very file; a rename would leave it the old one), never through a link. The
 * file and its directory are root's: the job cannot put anything else there.
 */
async function refreshHosts(dir: string, bookJson: string): Promise<void> {
  const path = join(dir, L.hosts);
  const current = await readTextFile(path);
  const hostname = current === null ? null : hostNameOf(current);
  const identity = hostname ? hostsFromBook(bookJson, hostname) : null;
  if (!identity || identity.hosts === current) return;
  const handle = await open(path, constants.O_WRONLY | constants.O_TRUNC | constants.O_NOFOLLOW);
  try {
    await handle.writeFile(identity.hosts);
  } finally {
    await handle.close();
  }
}

/** The addresses of `cidr` a fleet in `mode` may hand out (at most `capacity`); refuses a subnet outside the mode's range. */
export function localPool(mode: NetworkMode, cidr: string, capacity: number | null): string[] {
  const subnet = parseSubnet(cidr);
  const outerCidr = mode === 'netns' ? BRIDGE_SUBNET : '127.0.0.0/8';
  if (!subnetContains(parseSubnet(outerCidr), subnet)) {
    throw new Error(`local fleet: subnet ${cidr} must lie inside ${outerCidr} in ${mode} mode`);
  }
  const reserved = mode === 'netns' ? [BRIDGE_ADDRESS, '10.213.255.255'] : ['127.0.0.1'];
  return poolAddresses(subnet, reserved, capacity);
}

function linkNames(record: LocalInstanceRecord): NodeLinkNames | null {
  if (!record.netns || !record.host_link || !record.node_link) return null;
  return { netns: record.netns, hostLink: record.host_link, nodeLink: record.node_link };
}

function toInstance(record: LocalInstanceRecord): Instance {
  const details: Record<string, string> = { mode: record.mode, job_dir: record.job_dir };
  if (record.netns) details.netns = record.netns;
  return { instance_id: record.instance_id, host: 'local', internal_ip: record.ip, gpus: record.gpus, details };
}

/**
 * Bytes of `chunk` up to the last whole UTF-8 character, so a chunk never ends inside one (the
 * next read starts where this one stopped). A chunk of nothing but a broken sequence is taken as is.
 */
function wholeCharacters(chunk: Buffer): number {
  const n = chunk.length;
  for (let back = 1; back <= Math.min(3, n); back += 1) {
    const byte = chunk[n - back] ?? 0;
    if ((byte & 0xc0) === 0x80) continue; // continuation byte: look further back
    const need = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return need > back && n - back > 0 ? n - back : n;
  }
  return n;
}
