import { ApplicationFailure, proxyLocalActivities, workflowInfo } from '@temporalio/workflow';
import type { TroupeActivities } from '../../activities';
import { FailureType } from '../../src/run-core/failure-table';
import type { CarriedRun } from '../../src/contract/messages';
import type { NodeGroupInput } from '../../src/contract/node-group-input';

/**
 * A run's identity comes from Temporal, never from its input (issue 29, finding 3). Its id is the
 * workflow id and its uid the first execution's run id, which survives continue-as-new; the local
 * fleet's run user and directories, and the SSH fleets' holds, are keyed by that uid. Any Temporal
 * client may start a workflow with any input, so an input that names an identity is checked here.
 */

const FORGED_IDENTITY = FailureType.ForgedRunIdentity;

/**
 * `carried` is what an earlier execution of this run hands to the next (run-handover.ts): accepted
 * only on a continued execution, and only with this run's own id and uid in it.
 */
export function checkCarried(carried: CarriedRun): CarriedRun {
  const info = workflowInfo();
  if (!info.continuedFromExecutionRunId) {
    throw ApplicationFailure.nonRetryable(
      'run input refused: "carried" is handed over by a run to its own next execution (continue-as-new), never given by a client; start the run without it',
      FORGED_IDENTITY,
    );
  }
  const { run_id, run_uid } = carried.core.run;
  if (run_uid !== info.firstExecutionRunId || run_id !== info.workflowId) {
    throw ApplicationFailure.nonRetryable(
      `run input refused: its "carried" state names run ${run_id} (${run_uid}), not this run ${info.workflowId} (${info.firstExecutionRunId})`,
      FORGED_IDENTITY,
    );
  }
  return carried;
}

const { verifyRunExecution } = proxyLocalActivities<TroupeActivities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 5, nonRetryableErrorTypes: [FORGED_IDENTITY] },
});

/**
 * A group child acts as its run (the run's uid keys its machines): it must have been started by
 * that run. Its parent is recorded by the server, so a client cannot start one of its own; the
 * parent's first execution id is its uid when the run has not continued as new, and is read from
 * the parent's history otherwise (a workflow of another task queue might pose as a parent).
 */
export async function checkGroupParent(input: NodeGroupInput): Promise<void> {
  const info = workflowInfo();
  const { parent } = info;
  if (!parent || parent.workflowId !== input.run_workflow_id || !info.workflowId.startsWith(`${parent.workflowId}/group/`)) {
    throw ApplicationFailure.nonRetryable(
      `node group ${info.workflowId} refused: a group is started by its run (${input.run_workflow_id}), ${parent ? `not by ${parent.workflowId}` : 'not by a client'}`,
      FORGED_IDENTITY,
    );
  }
  if (parent.runId === input.run_uid) return;
  await verifyRunExecution({ workflow_id: parent.workflowId, run_id: parent.runId, run_uid: input.run_uid });
}
