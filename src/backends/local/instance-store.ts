import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { createFileExclusive, isErrno, pathExists, readJsonFile, removeFile, removeOrphanedTemps, writeFileAtomic } from './state-files';
import { attemptDirectoryName } from '../../runner/job-layout';
import { pathSegment } from './local-names';
import { mapLimit } from '../../concurrency/map-limit';
import { JobLimitsSchema } from '../cgroup-limits';

/** State files read at once when a whole directory is read (every record, every lease): a few dozen descriptors, not thousands. */
const READS_IN_FLIGHT = 32;

/**
 * The local fleet's state, in files under its state directory, shared by every worker process on
 * this machine:
 *
 *   leases/<ip>                       who holds an address (created with O_EXCL semantics)
 *   instances/<instance_id>.json      an instance: its address, namespace, job directory
 *   runs/<run>/<submission>/released  tombstone: the submission was released, provision refuses it
 *   runs/<run>/<submission>/owner.json the run's workflow id (what the reaper asks Temporal about)
 *   runs/<run>/<submission>/<job>/    the job's directory (attempt k > 0: <job>.attempt-<k>/, attemptDirectoryName)
 */

export const NetworkModeSchema = z.enum(['netns', 'loopback']);
export type NetworkMode = z.infer<typeof NetworkModeSchema>;

export const LocalInstanceRecordSchema = z.object({
  instance_id: z.string(),
  run_id: z.string(),
  submission: z.number().int().nonnegative(),
  job_num: z.number().int().nonnegative(),
  job_name: z.string(),
  /** Absent for attempt 0 (records from before attempts read the same). */
  attempt: z.number().int().nonnegative().optional(),
  ip: z.string(),
  gpus: z.number().int().nonnegative(),
  mode: NetworkModeSchema,
  /** Namespace and veth names (netns mode only). */
  netns: z.string().nullable(),
  host_link: z.string().nullable(),
  node_link: z.string().nullable(),
  job_dir: z.string(),
  /** The group's `resources.shm_size` in GB, the size of the node's /dev/shm when isolated (absent or null: the tmpfs default). */
  shm_size_gb: z.number().nullable().optional(),
  /** The job's cgroup limits, from the group's `resources` (cgroup-limits.ts; absent: records from before limits, none). */
  limits: JobLimitsSchema.optional(),
});
export type LocalInstanceRecord = z.infer<typeof LocalInstanceRecordSchema>;

/** Whose a submission is: written at its first provisioning, read by the worker's reaper. */
export const RunOwnerSchema = z.object({ run_workflow_id: z.string(), run_id: z.string(), submission: z.number().int().nonnegative() });
export type RunOwner = z.infer<typeof RunOwnerSchema>;

const LeaseSchema = z.object({ instance_id: z.string(), run_id: z.string(), submission: z.number().int() });
export type Lease = z.infer<typeof LeaseSchema>;

export class InstanceStore {
  constructor(readonly stateDir: string) {}

  jobDir(runId: string, submission: number, jobName: string, attempt?: number): string {
    return join(this.submissionDir(runId, submission), attemptDirectoryName(pathSegment(jobName), attempt));
  }

  private submissionDir(runId: string, submission: number): string {
    return join(this.stateDir, 'runs', pathSegment(runId), String(submission));
  }

  private tombstonePath(runId: string, submission: number): string {
    return join(this.submissionDir(runId, submission), 'released');
  }

  private recordPath(instanceId: string): string {
    return join(this.stateDir, 'instances', `${instanceId}.json`);
  }

  private leasePath(ip: string): string {
    return join(this.stateDir, 'leases', ip);
  }

  async isReleased(runId: string, submission: number): Promise<boolean> {
    return await pathExists(this.tombstonePath(runId, submission));
  }

  async markReleased(runId: string, submission: number): Promise<void> {
    await writeFileAtomic(this.tombstonePath(runId, submission), `${new Date().toISOString()}\n`);
  }

  /** Records whose run a submission is, once (a retried provision finds it there). */
  async recordOwner(owner: RunOwner): Promise<void> {
    await createFileExclusive(join(this.submissionDir(owner.run_id, owner.submission), 'owner.json'), `${JSON.stringify(owner)}\n`);
  }

  /** Every submission whose owner is recorded (runs/<run>/<submission>/owner.json). */
  async owners(): Promise<RunOwner[]> {
    const runs = join(this.stateDir, 'runs');
    const found: RunOwner[] = [];
    for (const run of await listDir(runs)) {
      for (const submission of await listDir(join(runs, run))) {
        const owner = await readJsonFile(join(runs, run, submission, 'owner.json'), RunOwnerSchema).catch(() => null);
        if (owner) found.push(owner);
      }
    }
    return found;
  }

  async readRecord(instanceId: string): Promise<LocalInstanceRecord | null> {
    return await readJsonFile(this.recordPath(instanceId), LocalInstanceRecordSchema);
  }

  /** Creates the record unless one exists; returns the record that won (ours or the earlier one). */
  async createRecord(record: LocalInstanceRecord): Promise<LocalInstanceRecord> {
    if (await createFileExclusive(this.recordPath(record.instance_id), `${JSON.stringify(record, null, 2)}\n`)) {
      return record;
    }
    const existing = await this.readRecord(record.instance_id);
    if (!existing) throw new Error(`instance record ${record.instance_id} vanished while being created`);
    return existing;
  }

  async removeRecord(instanceId: string): Promise<void> {
    await removeFile(this.recordPath(instanceId));
  }

  /** The job directories of a submission (whether or not their instance records are still there). */
  async jobDirs(runId: string, submission: number): Promise<string[]> {
    const dir = this.submissionDir(runId, submission);
    const entries = await readdir(dir, { withFileTypes: true }).catch((err: unknown) => {
      if (isErrno(err, 'ENOENT')) return [];
      throw err;
    });
    return entries.filter((e) => e.isDirectory()).map((e) => join(dir, e.name));
  }

  async listRecords(runId: string, submission: number): Promise<LocalInstanceRecord[]> {
    return (await this.allRecords()).filter((r) => r.run_id === runId && r.submission === submission);
  }

  async allRecords(): Promise<LocalInstanceRecord[]> {
    const names = await listDir(join(this.stateDir, 'instances'));
    const ids = names.filter((n) => n.endsWith('.json')).map((n) => n.slice(0, -'.json'.length));
    const records = await mapLimit(ids, READS_IN_FLIGHT, (id) => this.readRecord(id));
    return records.filter((r): r is LocalInstanceRecord => r !== null);
  }

  private async readLease(ip: string): Promise<Lease | null> {
    try {
      return await readJsonFile(this.leasePath(ip), LeaseSchema);
    } catch {
      return null;
    }
  }

  private async leases(): Promise<Map<string, Lease>> {
    const ips = (await listDir(join(this.stateDir, 'leases'))).filter((n) => !n.includes('.tmp-'));
    const entries = await mapLimit(ips, READS_IN_FLIGHT, async (ip) => [ip, await this.readLease(ip)] as const);
    return new Map(entries.filter((e): e is readonly [string, Lease] => e[1] !== null));
  }

  /** How many addresses of `pool` no instance holds now. */
  async freeAddresses(pool: readonly string[]): Promise<number> {
    const held = await this.leases();
    return pool.filter((ip) => !held.has(ip)).length;
  }

  /**
   * An address for each instance, in one pass over the leases and the pool (a batch of a thousand
   * reads the lease files once, not once per instance): the one it already leased (a provision()
   * that died before writing its record), else the next free one of `pool`. Exclusive creation
   * makes two processes never lease one address. All or nothing: when the pool has too few free
   * addresses, the ones taken here are given back and the answer is null.
   */
  async leaseAddresses(owners: readonly Lease[], pool: readonly string[]): Promise<Map<string, string> | null> {
    const held = await this.leases();
    const leased = new Map<string, string>();
    for (const [ip, lease] of held) leased.set(lease.instance_id, ip);
    const out = new Map<string, string>();
    const wanting = owners.filter((owner) => {
      const earlier = leased.get(owner.instance_id);
      if (earlier !== undefined) out.set(owner.instance_id, earlier);
      return earlier === undefined;
    });
    // One cursor over the pool shared by a few lanes (creating a lease file is four system calls).
    let next = 0;
    const take = async (owner: Lease): Promise<string | null> => {
      while (next < pool.length) {
        const candidate = pool[next++] as string;
        if (!held.has(candidate) && (await createFileExclusive(this.leasePath(candidate), `${JSON.stringify(owner)}\n`))) return candidate;
      }
      return null;
    };
    const taken = await mapLimit(wanting, READS_IN_FLIGHT, async (owner) => ({ owner, ip: await take(owner) }));
    if (taken.some((t) => t.ip === null)) {
      await mapLimit(taken, READS_IN_FLIGHT, async (t) => (t.ip === null ? undefined : await this.releaseAddress(t.ip, t.owner.instance_id)));
      return null;
    }
    for (const t of taken) out.set(t.owner.instance_id, t.ip as string);
    return out;
  }

  /** Gives the address back, only if the instance still holds it. */
  async releaseAddress(ip: string, instanceId: string): Promise<void> {
    const lease = await this.readLease(ip);
    if (lease?.instance_id === instanceId) await removeFile(this.leasePath(ip));
  }

  /** Temporary files of writers that were killed mid-write (they never count as leases or records, but must not pile up). */
  async removeOrphanedTemps(): Promise<void> {
    await Promise.all(['leases', 'instances'].map((sub) => removeOrphanedTemps(join(this.stateDir, sub))));
  }

  /** Leases of a submission whose instance record was never written (a provision() that died). */
  async orphanLeases(runId: string, submission: number): Promise<{ ip: string; instance_id: string }[]> {
    const out: { ip: string; instance_id: string }[] = [];
    for (const [ip, lease] of await this.leases()) {
      if (lease.run_id !== runId || lease.submission !== submission) continue;
      if (!(await this.readRecord(lease.instance_id))) out.push({ ip, instance_id: lease.instance_id });
    }
    return out;
  }
}

async function listDir(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return [];
    throw err;
  }
}
