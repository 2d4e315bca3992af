import type { Context } from '@temporalio/activity';
import { SecretKeyError } from '../src/secrets/sealed-env';
import type { RunExecution } from '../src/secrets/seal-binding';

/**
 * The run an activity works for, as Temporal knows it rather than as the input says: the activity
 * is scheduled by a NodeGroupWorkflow, whose parent must be the RunWorkflow the input names; that
 * parent's first execution id survives continue-as-new. A client that starts a NodeGroupWorkflow
 * itself (no parent) or names another run is refused. Two describe calls, made only by a batch
 * that has sealed values to open.
 */
export async function runExecutionOf(ctx: Context, claimedRunWorkflowId: string): Promise<RunExecution> {
  const { workflowExecution, workflowType } = ctx.info;
  const refuse = (why: string) =>
    new SecretKeyError(`sealed env values of ${claimedRunWorkflowId} not opened: ${why}; a run's secrets open only in the groups its RunWorkflow started`);
  if (!workflowExecution || workflowType !== 'NodeGroupWorkflow') throw refuse(`called by ${workflowType ?? 'no workflow'}, not a NodeGroupWorkflow`);
  const group = await ctx.client.workflow.getHandle(workflowExecution.workflowId, workflowExecution.runId ?? undefined).describe();
  const parent = group.parentExecution;
  if (!parent) throw refuse(`${workflowExecution.workflowId} was not started by a run`);
  if (parent.workflowId !== claimedRunWorkflowId) throw refuse(`${workflowExecution.workflowId} was started by ${parent.workflowId}`);
  const run = await ctx.client.workflow.getHandle(parent.workflowId, parent.runId ?? undefined).describe();
  if (run.type !== 'RunWorkflow') throw refuse(`${parent.workflowId} is a ${run.type}, not a RunWorkflow`);
  const firstRunId = run.raw.workflowExecutionInfo?.firstRunId;
  if (!firstRunId) throw refuse('the Temporal service does not report first run ids (Troupe needs a server from 1.24 on)');
  return { workflowId: parent.workflowId, firstRunId };
}
