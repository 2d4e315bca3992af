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

/** One submission's group children, started together and cancelled together. */
export interface Submission {
  scope: CancellationScope;
  children: ChildWorkflowHandle<typeof NodeGroupWorkflow>[];
  /** Settle when each child has ended (a cancelled child's end is not a failure). */
  childResults: Promise<void>[];
  /** The first child that failed on its own, as the run's message. */
  childFailure: string | null;
  /** Jobs already told they may start. */
  signalled: Set<number>;
  /** Signals sent but not yet awaited. */
  delivered: Promise<unknown> | null;
  runningSinceMs: number | null;
}

/** A child per group, in a scope the submission's end cancels. */
export async function startGroups(run: Run): Promise<Submission> {
  const scope = new CancellationScope();
  const children = await scope.run(() => Promise.all(run.input.plan.groups.map((group) => startGroup(run, group.index))));
  const submission: Submission = { scope, children, childResults: [], childFailure: null, signalled: new Set(), delivered: null, runningSinceMs: null };
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
  };
  return startChild(NodeGroupWorkflow, {
    workflowId: nodeGroupWorkflowId(state.run_id, group.name, state.submission),
    args: [childInput],
    cancellationType: ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    staticSummary: `group ${group.name}: ${group.nodes} node${group.nodes === 1 ? '' : 's'}, jobs ${childInput.jobs[0]?.job_num ?? ''}-${childInput.jobs.at(-1)?.job_num ?? ''}`,
    parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
  });
}
