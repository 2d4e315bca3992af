import type { Client } from '@temporalio/client';
import { SshTargetSchema, type SshTarget } from '../src/backends/ssh/target';
import { runJobsQuery } from '../src/contract/messages';
import { JOBS_PAGE_MAX, type JobState } from '../src/contract/run-state';

/**
 * Which replicas of a run sit on an SSH host behind its fleet's proxy_jump, for the worker to read
 * them through the jump host. The run core's scrape targets carry only a URL (the replica's internal
 * address), so the activity looks the address up in the run's own job records: the SSH backend wrote
 * each host's target there (`instance.details.target`: the fleet's host, its jump and the keys the
 * fleet verified), which is what it reaches the host by too.
 */

/** By internal address: the SSH host behind a jump that a job of the run had there. Pure. */
export function jumpedHostsOf(jobs: readonly JobState[]): Map<string, SshTarget> {
  const hosts = new Map<string, SshTarget>();
  // Live jobs last: what a replica has now wins over what an earlier one had at that address.
  const ordered = [...jobs.filter((j) => j.removed), ...jobs.filter((j) => !j.removed)];
  for (const job of ordered) {
    const instance = job.instance;
    if (!instance?.internal_ip) continue;
    const target = sshTargetOf(instance.details);
    if (target?.proxy_jump) hosts.set(instance.internal_ip, target);
    else hosts.delete(instance.internal_ip);
  }
  return hosts;
}

function sshTargetOf(details: Readonly<Record<string, string>>): SshTarget | null {
  if (details.target === undefined) return null;
  try {
    const parsed = SshTargetSchema.safeParse(JSON.parse(details.target));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/** Every internal address the run's jobs have (behind a jump or not): what a lookup answered for. */
function addressesOf(jobs: readonly JobState[]): Set<string> {
  return new Set(jobs.flatMap((j) => (j.instance?.internal_ip ? [j.instance.internal_ip] : [])));
}

/** The run's jobs, a page at a time (its `runJobs` query). */
export async function runJobsOf(client: Client, runWorkflowId: string): Promise<JobState[]> {
  const handle = client.workflow.getHandle(runWorkflowId);
  const jobs: JobState[] = [];
  for (;;) {
    const page = await handle.query(runJobsQuery, { offset: jobs.length, limit: JOBS_PAGE_MAX });
    jobs.push(...page);
    if (page.length < JOBS_PAGE_MAX) return jobs;
  }
}

/** A lookup is kept this long (a reading every 2 s need not query the run each time). */
export const JUMP_LOOKUP_TTL_MS = 60_000;

/** Per run: its jumped hosts, asked again when an address it did not know turns up or the answer is old. */
export class ReplicaJumps {
  private readonly known = new Map<string, { at: number; addresses: Set<string>; hosts: Map<string, SshTarget> }>();

  constructor(private readonly jobsOf: (runWorkflowId: string) => Promise<JobState[]>) {}

  async hostsFor(runWorkflowId: string, addresses: readonly string[], now = Date.now()): Promise<Map<string, SshTarget>> {
    for (const [run, entry] of this.known) if (now - entry.at > JUMP_LOOKUP_TTL_MS) this.known.delete(run);
    const entry = this.known.get(runWorkflowId);
    if (entry && addresses.every((a) => entry.addresses.has(a))) return entry.hosts;
    const jobs = await this.jobsOf(runWorkflowId);
    const fresh = { at: now, addresses: addressesOf(jobs), hosts: jumpedHostsOf(jobs) };
    this.known.set(runWorkflowId, fresh);
    return fresh.hosts;
  }
}
