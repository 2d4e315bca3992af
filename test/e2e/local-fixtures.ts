import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { readlink } from 'node:fs/promises';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Instance, JobFiles, JobRef, ProvisionRequest } from '../../src/backends/backend';
import { LocalBackend, type LocalBackendOptions } from '../../src/backends/local/local-backend';
import { nodeLinkNames } from '../../src/backends/local/local-names';
import { BRIDGE } from '../../src/backends/local/netns';
import { environHas, readProcStat } from '../../src/backends/local/proc';
import type { Resources } from '../../src/config/resources-schema';
import { expandJobs } from '../../src/plan/expand';
import type { GroupPlan, JobPlan } from '../../src/plan/plan-schema';
import { buildClusterInfo } from '../../src/runner/cluster-info';
import { renderJobFiles } from '../../src/runner/job-files';
import { JobLayout } from '../../src/runner/job-layout';

/** Runs, requests and clean-up for tests of the local fleet with real processes and namespaces. */

export function resources(gpuMin = 0, gpuMax: number | null = 0): Resources {
  return {
    cpu: { arch: null, count: { min: 2, max: null } },
    memory: { min: 8, max: null },
    shm_size: null,
    disk: { min: 100, max: null },
    gpu: { vendor: null, name: null, count: { min: gpuMin, max: gpuMax }, memory: null, total_memory: null, compute_capability: null },
  };
}

export interface TestRun {
  runId: string;
  runName: string;
  submission: number;
  env: Record<string, string>;
  groups: GroupPlan[];
  jobs: JobPlan[];
}

export function makeRun(
  groups: { name: string; nodes: number; commands: string[]; gpus?: number }[],
  env: Record<string, string> = {},
): TestRun {
  const runName = `t-${randomUUID().slice(0, 8)}`;
  const plans: GroupPlan[] = groups.map((g, index) => ({
    index,
    name: g.name,
    nodes: g.nodes,
    resources: resources(g.gpus ?? 0, g.gpus ?? 0),
    commands: g.commands,
    ports: [],
  }));
  const jobs = expandJobs(runName, plans);
  return { runId: `${runName}-uid`, runName, submission: 0, env, groups: plans, jobs };
}

export function groupRequest(run: TestRun, groupIndex: number, jobs?: JobPlan[]): ProvisionRequest {
  const group = run.groups[groupIndex]!;
  return {
    run_id: run.runId,
    run_name: run.runName,
    submission: run.submission,
    group,
    jobs: jobs ?? run.jobs.filter((j) => j.node_group_index === groupIndex),
    fleets: null,
  };
}

export function jobRef(run: TestRun, jobNum: number, instance: Instance): JobRef {
  const job = run.jobs[jobNum]!;
  return { run_id: run.runId, run_name: run.runName, submission: run.submission, job_num: jobNum, job_name: job.job_name, instance };
}

/** A job's files as the start activity renders them, for the run's addresses `ips` (rank order, no GPUs). */
export function runJobFiles(run: TestRun, jobNum: number, ips: readonly string[], jobDirectory: string): JobFiles {
  const addresses = run.groups.map((g) => run.jobs.filter((j) => j.node_group_index === g.index).map((j) => ips[j.job_num]!));
  return renderJobFiles({
    run: { run_name: run.runName, nodes_num: run.jobs.length, env: run.env, image: null, working_dir: null },
    runUid: run.runId,
    job: run.jobs[jobNum]!,
    cluster: buildClusterInfo([...ips], ips.map(() => 0), jobNum),
    addresses,
    jobDirectory,
  });
}

export async function waitFor<T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** True while /proc shows the pid as a live process (zombies count as gone). */
export async function alive(pid: number): Promise<boolean> {
  const stat = await readProcStat(pid);
  return stat !== null && stat.state !== 'Z';
}

/**
 * The pid the machine knows for `pid` as a job printed it (`$!`): an isolated job (as root) lives
 * in a pid namespace of its own, entered through `started/ns_init`; otherwise the same pid.
 */
export async function hostPid(jobDir: string, pid: number): Promise<number> {
  const initFile = join(jobDir, JobLayout.started, JobLayout.nsInit);
  if (!existsSync(initFile)) return pid;
  const init = readFileSync(initFile, 'utf8').split(' ')[0];
  const ns = await readlink(`/proc/${init}/ns/pid`);
  for (const entry of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      if ((await readlink(`/proc/${entry}/ns/pid`)) !== ns) continue;
      const nspids = /^NSpid:\s+(.*)$/m.exec(readFileSync(`/proc/${entry}/status`, 'utf8'))?.[1]?.trim().split(/\s+/);
      if (nspids && Number(nspids[nspids.length - 1]) === pid) return Number(entry);
    } catch {
      // ended while we looked
    }
  }
  throw new Error(`no process ${pid} in the pid namespace of ${jobDir}`);
}

/**
 * A fleet in a temporary state directory plus everything needed to clean it up even when a test
 * fails: it releases every run it saw, then removes by name any namespace or link of its instances
 * that is left, and the bridge if this file created it and nothing else is attached.
 */
export class LocalFleetHarness {
  readonly stateDir = mkdtempSync(join(tmpdir(), 'troupe-local-test-'));
  private readonly runs = new Map<string, TestRun>();
  private readonly instanceIds = new Set<string>();
  private readonly bridgeExisted = existsSync(`/sys/class/net/${BRIDGE}`);
  readonly backends: LocalBackend[] = [];

  backend(options: Partial<LocalBackendOptions> = {}): LocalBackend {
    const backend = new LocalBackend({ stateDir: this.stateDir, network: 'auto', ...options });
    this.backends.push(backend);
    return backend;
  }

  track(run: TestRun, instances: readonly Instance[] = []): void {
    this.runs.set(`${run.runId}/${run.submission}`, run);
    for (const i of instances) this.instanceIds.add(i.instance_id);
  }

  async provision(backend: LocalBackend, run: TestRun): Promise<Instance[]> {
    this.track(run);
    const instances: Instance[] = [];
    for (const group of run.groups) {
      const placed = await backend.provision(groupRequest(run, group.index));
      this.track(run, placed);
      instances.push(...placed);
    }
    return instances;
  }

  /** Renders every job's files as the start activity does, and starts it. */
  async start(backend: LocalBackend, run: TestRun, instances: readonly Instance[], jobNums?: number[]): Promise<number[]> {
    const ips = instances.map((i) => i.internal_ip);
    const addresses = run.groups.map((g) => run.jobs.filter((j) => j.node_group_index === g.index).map((j) => ips[j.job_num]!));
    const nums = jobNums ?? run.jobs.map((j) => j.job_num);
    return await Promise.all(
      nums.map(async (num) => {
        const ref = jobRef(run, num, instances[num]!);
        const files = renderJobFiles({
          run: { run_name: run.runName, nodes_num: run.jobs.length, env: run.env, image: null, working_dir: null },
          runUid: run.runId,
          job: run.jobs[num]!,
          cluster: buildClusterInfo(ips, instances.map((i) => i.gpus), num),
          addresses,
          jobDirectory: backend.jobDirectory(ref),
          groupNames: run.groups.map((g) => g.name),
        });
        return (await backend.startJob(ref, files)).pid;
      }),
    );
  }

  async cleanup(): Promise<void> {
    const backend = this.backends[0] ?? this.backend();
    for (const run of this.runs.values()) {
      await backend.releaseRun(run.runId, run.submission).catch((err: unknown) => console.error('releaseRun in cleanup:', err));
    }
    for (const id of this.instanceIds) {
      const names = nodeLinkNames(id);
      if (existsSync(`/run/netns/${names.netns}`)) {
        for (const pid of execFileSync('ip', ['netns', 'pids', names.netns], { encoding: 'utf8' }).split('\n').filter(Boolean)) {
          if (await environHas(Number(pid), `TROUPE_INSTANCE_ID=${id}`)) process.kill(Number(pid), 'SIGKILL');
        }
        execFileSync('ip', ['netns', 'del', names.netns]);
      }
      if (existsSync(`/sys/class/net/${names.hostLink}`)) execFileSync('ip', ['link', 'del', names.hostLink]);
    }
    const attached = existsSync(`/sys/class/net/${BRIDGE}/brif`) ? readdirSync(`/sys/class/net/${BRIDGE}/brif`) : [];
    if (!this.bridgeExisted && existsSync(`/sys/class/net/${BRIDGE}`) && attached.length === 0) {
      execFileSync('ip', ['link', 'del', BRIDGE]);
    }
    rmSync(this.stateDir, { recursive: true, force: true });
  }
}
