import { Context } from '@temporalio/activity';
import { activityFailure } from './activity-failure';
import { FailureType } from '../src/run-core/failure-table';
import type { VerifyRunExecutionInput } from './types';

/** The workflow type whose uid a group child may act as (workflows/index.ts). */
const RUN_WORKFLOW_TYPE = 'RunWorkflow';

export function createRunIdentityActivities() {
  return {
    /**
     * Checks, from the server's record of the execution (its first history event), that it is a
     * RunWorkflow of this worker's task queue whose first execution is `run_uid`: what a group
     * child of a continued run asks of its parent before it acts as that run (run-identity.ts).
     */
    async verifyRunExecution({ workflow_id, run_id, run_uid }: VerifyRunExecutionInput): Promise<void> {
      const ctx = Context.current();
      const { history } = await ctx.client.workflowService.getWorkflowExecutionHistory({
        namespace: ctx.info.workflowNamespace,
        execution: { workflowId: workflow_id, runId: run_id },
        maximumPageSize: 1,
      });
      const started = history?.events?.[0]?.workflowExecutionStartedEventAttributes;
      const problem = !started
        ? 'its history has no start'
        : started.workflowType?.name !== RUN_WORKFLOW_TYPE
          ? `it is a ${started.workflowType?.name ?? 'workflow of no type'}, not a ${RUN_WORKFLOW_TYPE}`
          : started.taskQueue?.name !== ctx.info.taskQueue
            ? `it runs on task queue ${started.taskQueue?.name ?? '?'}, not ${ctx.info.taskQueue}`
            : started.firstExecutionRunId !== run_uid
              ? `its first execution is ${started.firstExecutionRunId ?? '?'}, not ${run_uid}`
              : null;
      if (problem) throw activityFailure(FailureType.ForgedRunIdentity, `run ${workflow_id} (${run_id}) cannot act as run ${run_uid}: ${problem}`);
    },
  };
}
