import { ApplicationFailure, condition, setHandler } from '@temporalio/workflow';
import { FailureType } from '../../src/run-core/failure-table';
import { deploymentChange, deploymentRefusal } from '../../src/run-core/deployment';
import { groupMembers } from '../../src/run-core/jobs';
import { routesSettled } from '../../src/run-core/routing';
import type { Plan } from '../../src/plan/plan-schema';
import { applyServiceUpdate, HANDING_OVER, type ApplyServiceResult } from '../../src/contract/messages';
import { stopAsked, type Run } from './run-context';

/**
 * A service's deployments as a Temporal Update (`troupe apply` of a changed service; the Web UI
 * shows each as an Update): checked before it is accepted — the plan, the run's state, what may
 * change — then carried out by the run's core (src/run-core/deployment.ts) and answered once it is
 * over and the gateways route by the new table.
 */
export function setDeployHandler(run: Run): void {
  setHandler(
    applyServiceUpdate,
    async ({ plan: given }) => {
      const plan = await checkedPlan(given);
      const id = (run.deploysAsked += 1);
      run.inbox.push({ kind: 'deploy', id, plan });
      const rolloutOf = () => (run.core.service?.rollout?.id === id ? run.core.service.rollout : null);
      await condition(() => rolloutOf()?.over === true || run.state.status !== 'RUNNING');
      const rollout = rolloutOf();
      run.inbox.push({ kind: 'deploy-answered', id });
      if (!rollout?.over) throw ApplicationFailure.nonRetryable(`the run ended (${run.state.status}) before its deployment was over`, FailureType.DeployFailed);
      if (rollout.error) throw ApplicationFailure.nonRetryable(rollout.error, FailureType.DeployFailed);
      await condition(() => routesSettled(run.core) || run.state.status !== 'RUNNING');
      const { groups } = run.core.plan;
      return {
        deployment: rollout.number,
        rolled: rollout.rolled.map((g) => groups[g]?.name ?? String(g)),
        groups: groups.map((g) => ({ name: g.name, replicas: groupMembers(run.state.jobs, g.index).length })),
      } satisfies ApplyServiceResult;
    },
    { validator: ({ plan }) => validate(run, plan) },
  );
}

/** Refusals say what to change; nothing of a refused deployment reaches the run's history. */
function validate(run: Run, plan: Plan): void {
  if (run.handingOver && !stopAsked(run)) {
    throw ApplicationFailure.retryable(`run ${run.state.run_name} is continuing as new (its history is long); try again in a moment`, HANDING_OVER);
  }
  const refused = deploymentRefusal(run.core, stopAsked(run));
  if (refused) throw new Error(refused);
  let change: ReturnType<typeof deploymentChange>;
  try {
    const sizes = run.core.plan.groups.map((g) => groupMembers(run.state.jobs, g.index).length);
    change = deploymentChange(run.core.plan, plan, sizes);
  } catch {
    throw new Error('not a service plan: apply it with `troupe apply -f service.yml` or the SDK (applyService)');
  }
  if (change.kind === 'refused') throw new Error(change.message);
}

/** The plan as the run's input schema has it (a client is a stranger); loaded as RunWorkflow loads it. */
async function checkedPlan(given: unknown): Promise<Plan> {
  const { RunInputSchema } = await import(/* webpackMode: "eager" */ '../../src/contract/message-schemas');
  const parsed = RunInputSchema.shape.plan.safeParse(given);
  if (!parsed.success) throw ApplicationFailure.nonRetryable(`not a service plan: ${parsed.error.message}`, FailureType.DeployFailed);
  return parsed.data;
}
