import {
  CancellationScope,
  ChildWorkflowCancellationType,
  ParentClosePolicy,
  isCancellation,
  startChild,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import { rootMessage } from '../failures';
import { isJobFinished } from '../../src/run-core/jobs';
import { jobPlanOf } from '../../src/run-core/live';
import { nodeGroupWorkflowId } from '../../src/contract/ids';
import { NodeGroupWorkflow, type NodeGroupInput } from '../node-group/node-group-workflow';
import type { Run } from './run-context';
import type { Submission } from './submission';

export type { Submission } from './submission';

/**
 * A child per group, in a scope the submission's end cancels. `adopted` (an execution that took
 * over from the one before): the children take up the jobs that run, without provisioning.
 */
export async function startGroups(run: Run, adopted?: { signalled: Set<number> }): Promise<Submission> {
  const scope = new CancellationScope();
  const children = await scope.run(() => Promise.all(run.input.plan.groups.map((group) => startGroup(run, group.index, adopted !== undefined))));
  const submission: Submission = {
    scope,
    children,
    childResults: [],
    signalled: adopted?.signalled ?? new Set(),
    delivered: null,
    launchRecorded: adopted !== undefined,
  };
  run.submissionNow = submission;
  // An execution that took over from the one before has its groups back.
  run.handingOver = false;
  const number = run.state.submission;
  submission.childResults = children.map((child, i) =>
    child.result().catch((err: unknown) => {
      if (!isCancellation(err)) run.inbox.push({ kind: 'group-failed', submission: number, message: `group ${run.input.plan.groups[i]?.name}: ${rootMessage(err)}` });
    }),
  );
  return submission;
}

/** The group that starts unlocked: job 0's (group 0's, unless a service's group 0 starts with no replica). */
export function firstGroup(run: Run): number {
  return run.input.plan.jobs[0]?.node_group_index ?? 0;
}

/** The jobs of group `index` that run now, where they run: what its adopting child takes up. */
function runningJobsOf(run: Run, index: number): NodeGroupInput['adopt'] {
  return run.state.jobs.flatMap((job) => {
    if (job.group_index !== index || job.removed || isJobFinished(job) || job.instance === null) return [];
    return [{ job: jobPlanOf(run.input.plan, run.core.live, job), instance: job.instance }];
  });
}

function startGroup(run: Run, index: number, adopt: boolean): Promise<ChildWorkflowHandle<typeof NodeGroupWorkflow>> {
  const { input, state } = run;
  const { plan } = input;
  const group = plan.groups[index];
  if (!group) throw new Error(`no group ${index}`);
  const childInput: NodeGroupInput = {
    run_workflow_id: state.run_id,
    run_uid: state.run_uid,
    submission: state.submission,
    backend: input.backend,
    capabilities: run.capabilities,
    group,
    jobs: plan.jobs.filter((job) => job.node_group_index === index),
    run: {
      run_name: plan.run_name,
      nodes_num: plan.nodes_num,
      env: plan.env,
      image: plan.image,
      working_dir: plan.working_dir,
      fleets: plan.fleets,
    },
    group_sizes: plan.groups.map((g) => g.nodes),
    group_names: plan.groups.map((g) => g.name),
    options: input.options,
    retry: run.core.retry,
    retry_deadline_ms: run.core.retry_deadline_ms,
    unlocked: index === firstGroup(run),
    live: run.live !== null,
    adopt: adopt ? runningJobsOf(run, index) : null,
  };
  const jobs = childInput.adopt ? childInput.adopt.map((a) => a.job) : childInput.jobs;
  const what = childInput.adopt ? `takes up ${jobs.length} running node${jobs.length === 1 ? '' : 's'}` : `${group.nodes} node${group.nodes === 1 ? '' : 's'}`;
  return startChild(NodeGroupWorkflow, {
    workflowId: nodeGroupWorkflowId(state.run_id, group.name, state.submission, run.generation),
    args: [childInput],
    cancellationType: ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    staticSummary: `group ${group.name}: ${what}, jobs ${jobs.map((j) => j.job_num).join(', ')}`,
    parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
  });
}
