import { condition } from '@temporalio/workflow';
import type { NodeGroupInput } from '../../src/contract/node-group-input';
import { serveNewAttempts } from './node-group-attempts';
import { newGroupState, setGroupHandlers, startableJobs, type GroupState } from './node-group-state';
import { awaitRunners, provision, runBatch } from './node-group-steps';
import { checkGroupParent } from '../run/run-identity';

export type { NodeGroupInput } from '../../src/contract/node-group-input';

/**
 * One node group of a run: provisions its master (or its whole batch), then its other jobs; waits
 * for all their runners while the run gathers the address book; then, each time the run lets some
 * of its jobs start, hands that batch to one activity that starts the jobs and supervises them to
 * their end. Everything learnt goes to the run as signals (from the batch activity itself, once
 * jobs run); the run alone decides order, failure and teardown.
 */
export async function NodeGroupWorkflow(input: NodeGroupInput): Promise<void> {
  await checkGroupParent(input);
  const group = newGroupState(input);
  setGroupHandlers(group);
  const first = input.adopt ? adoptRunningJobs(input, group, input.adopt) : startInitialJobs(input, group);
  // A group that may heal or grow lives until the run ends it, taking new attempts of its ranks.
  if (input.live) await Promise.all([first, serveNewAttempts(input, group)]);
  else await first;
}

/**
 * The run continued as new: its jobs run on, and this group's child of the new execution
 * supervises them again. Starting a job that runs returns its process (starts are at most once
 * in every backend); what ended meanwhile is on the host's disk and reported again. Each was
 * READY (or has no probe) when the run handed over, so none is probed again.
 */
async function adoptRunningJobs(input: NodeGroupInput, group: GroupState, adopt: NonNullable<NodeGroupInput['adopt']>): Promise<void> {
  if (adopt.length === 0) return;
  for (const { job, instance } of adopt) {
    group.instances.set(job.job_num, instance);
    group.settled.add(job.job_num);
  }
  await runBatch(input, group, adopt.map((a) => a.job), null, { probe: false });
}

/** The group's first machines: provisioned, their runners awaited, started a batch at a time as the run allows. */
async function startInitialJobs(input: NodeGroupInput, group: GroupState): Promise<void> {
  const [master, ...others] = input.jobs;
  if (master === undefined) return;

  // The staged unlock: the master's attempt (or the whole batch) first; the rest only after it.
  await condition(() => group.unlocked);
  if (input.capabilities.group_provisioning) {
    if (!(await provision(input, group, input.jobs))) return;
  } else {
    if (!(await provision(input, group, [master]))) return;
    const results = await Promise.all(others.map((job) => provision(input, group, [job])));
    if (results.includes(false)) return;
  }

  // Every runner is awaited at once, while the run gathers the address book.
  const placed = input.jobs.filter((job) => group.instances.has(job.job_num));
  const runners = awaitRunners(input, group, placed);

  // Then the jobs the run lets start, a batch at a time: started and supervised by one activity.
  const batches: Array<Promise<void>> = [];
  for (;;) {
    await condition(() => startableJobs(group, placed).length > 0 || (group.runnersAnswered && placed.every((job) => group.settled.has(job.job_num))));
    const batch = startableJobs(group, placed);
    if (batch.length === 0) break;
    batch.forEach((job) => group.settled.add(job.job_num));
    batches.push(runBatch(input, group, batch));
  }
  await Promise.all([runners, ...batches, ...group.inFlight]);
}
