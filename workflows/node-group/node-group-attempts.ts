import { condition } from '@temporalio/workflow';
import type { JobRef } from '../../src/backends/backend';
import type { JobPlan } from '../../src/plan/plan-schema';
import { teardownActivities } from './node-group-activities';
import type { NodeGroupInput } from '../../src/contract/node-group-input';
import { attemptKey, hostsOf, type GroupState } from './node-group-state';
import { awaitRunnersOf, provision, runBatch } from './node-group-steps';

/**
 * New machines for some of the group's ranks while the run goes on (a restart replaces a node, a
 * resize adds one): provisioned first, then the machines they replace given back (so a
 * replacement never lands on the machine it replaces), then each started once the run lets it,
 * with the address book as it is then. Runs until the run ends the group.
 */
export async function serveNewAttempts(input: NodeGroupInput, group: GroupState): Promise<never> {
  for (;;) {
    await condition(() => group.attemptRequests.length > 0);
    const request = group.attemptRequests.shift();
    // Failures are reported to the run inside; the group's end (a cancellation) ends these too.
    if (request) void runAttempts(input, group, request.jobs, request.release).catch(() => undefined);
  }
}

async function runAttempts(input: NodeGroupInput, group: GroupState, jobs: JobPlan[], release: JobRef[]): Promise<void> {
  // Given back beside the new machines' start (a lost host may take long to answer), or first when
  // the fleet has no room for the new ones; given up on, they still go back with the run's
  // teardown (releaseRun).
  let released: Promise<void> | null = null;
  const giveBack = () => {
    const summary = `release the replaced ${release.length === 1 ? 'machine' : `${release.length} machines`} on ${hostsOf(release)}`;
    released ??= teardownActivities.releaseJobs.executeWithOptions({ summary }, [{ backend: input.backend, jobs: release, grace_s: input.options.stop_grace_s }]).catch(() => undefined);
    return released;
  };
  const room = { makeRoom: release.length > 0 ? giveBack : null };
  const placed: JobPlan[] = [];
  if (input.capabilities.group_provisioning) {
    if (await provision(input, group, jobs, room)) placed.push(...jobs);
  } else {
    const results = await Promise.all(jobs.map((job) => provision(input, group, [job], room)));
    placed.push(...jobs.filter((_, i) => results[i]));
  }
  if (release.length > 0) void giveBack();
  await startPlaced(input, group, placed);
  await released;
}

async function startPlaced(input: NodeGroupInput, group: GroupState, placed: JobPlan[]): Promise<void> {
  if (placed.length === 0) return;
  const failed = await awaitRunnersOf(input, group, placed);
  await Promise.all(
    placed
      .filter((job) => !failed.has(job.job_num))
      .map(async (job) => {
        const key = attemptKey(job.job_num, job.attempt ?? 0);
        await condition(() => group.attemptStarts.has(key));
        const book = group.attemptStarts.get(key) ?? null;
        group.attemptStarts.delete(key);
        await runBatch(input, group, [job], book);
      }),
  );
}

