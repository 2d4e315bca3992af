import {
  CancellationScope,
  ChildWorkflowCancellationType,
  ParentClosePolicy,
  isCancellation,
  startChild,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import { rootMessage } from './failures';
import { nodeGroupWorkflowId } from './ids';
import { NodeGroupWorkflow, type NodeGroupInput } from './node-group-workflow';
import type { Run } from './run-context';
import type { Submission } from './submission';

export type { Submission } from './submission';

/** A child per group, in a scope the submission's end cancels. */
export async function startGroups(run: Run): Promise<Submission> {
  const scope = new CancellationScope();
  const children = await scope.run(() => Promise.all(run.input.plan.groups.map((group) => startGroup(run, group.index))));
  const submission: Submission = { scope, children, childResults: [], childFailure: null, signalled: new Set(), delivered: null, runningSinceMs: null };
  run.submissionNow = submission;
  submission.childResults = children.map((child, i) =>
    child.result().catch((err: unknown) => {
      if (!isCancellation(err)) submission.childFailure ??= `group ${run.input.plan.groups[i]?.name}: ${rootMessage(err)}`;
    }),
  );
  return submission;
}

function startGroup(run: Run, index: number): Promise<ChildWorkflowHandle<typeof NodeGroupWorkflow>> {
  const { input, state } = run;
  const { plan } = input;
  const group = plan.groups[index];
  if (!group) throw new Error(`no group ${index}`);
  const childInput: NodeGroupInput = {
    run_workflow_id: state.run_id,
    run_uid: state.run_uid,
    submission: state.submission,
    backend: input.backend,
    group_provisioning: run.groupProvisioning,
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
    options: input.options,
    retry: run.retry,
    retry_deadline_ms: run.retryDeadlineMs,
    unlocked: index === 0,
    live: run.live !== null,
  };
  return startChild(NodeGroupWorkflow, {
    workflowId: nodeGroupWorkflowId(state.run_id, group.name, state.submission),
    args: [childInput],
    cancellationType: ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    staticSummary: `group ${group.name}: ${group.nodes} node${group.nodes === 1 ? '' : 's'}, jobs ${childInput.jobs[0]?.job_num ?? ''}-${childInput.jobs.at(-1)?.job_num ?? ''}`,
    parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
  });
}
