import { ApplicationFailure, condition, setHandler } from '@temporalio/workflow';
import { FailureType } from '../../src/run-core/failure-table';
import { deploymentChange } from '../../src/run-core/deployment';
import { deploymentRefusal } from '../../src/run-core/rollout-steps';
import { groupMembers } from '../../src/run-core/jobs';
import { routesSettled } from '../../src/run-core/routing';
import type { Plan } from '../../src/plan/plan-schema';
import { applyServiceUpdate, rolloutControlUpdate, type ApplyServiceResult, type RolloutControlResult } from '../../src/contract/messages';
import { lastGoodPlan, revertOf, rolloutControlRefusal } from '../../src/run-core/rollout-control';
import { refuseWhileHandingOver, stopAsked, type Run } from './run-context';

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
      // The spec a rollout under way replaces, applied again: that rollout rolled back, and this Update answers once it is.
      const revert = revertOf(run.core, plan);
      const under = run.core.service?.rollout;
      if (revert && under) {
        run.inbox.push({ kind: 'rollout-control', action: 'rollback', why: revert });
        const error = await rolloutEnded(run, under.id);
        if (error !== null && !error.includes(revert)) throw ApplicationFailure.nonRetryable(error, FailureType.DeployFailed);
        return await answerOnceRouted(run, under.number, []);
      }
      const id = (run.deploysAsked += 1);
      run.inbox.push({ kind: 'deploy', id, plan });
      const rolloutOf = () => (run.core.service?.rollout?.id === id ? run.core.service.rollout : null);
      await condition(() => rolloutOf()?.over === true || run.state.status !== 'RUNNING');
      const rollout = rolloutOf();
      run.inbox.push({ kind: 'deploy-answered', id });
      if (!rollout?.over) throw ApplicationFailure.nonRetryable(`the run ended (${run.state.status}) before its deployment was over`, FailureType.DeployFailed);
      if (rollout.error) throw ApplicationFailure.nonRetryable(rollout.error, FailureType.DeployFailed);
      return await answerOnceRouted(run, rollout.number, rollout.rolled);
    },
    { validator: ({ plan }) => validate(run, plan) },
  );
}

/**
 * A rollout steered by hand (`troupe rollout pause|resume|rollback`) as a Temporal Update: checked
 * before it is accepted (src/run-core/rollout-control.ts), then carried out by the run's core. A
 * pause or resume answers at once; a rollback once it is over — of the rollout under way, or, with
 * none, the last good spec deployed again as the next deployment.
 */
export function setRolloutControlHandler(run: Run): void {
  setHandler(
    rolloutControlUpdate,
    async ({ action }) => {
      const under = run.core.service?.rollout;
      if (action === 'rollback' && (!under || under.over)) {
        const plan = lastGoodPlan(run.core);
        if (!plan) throw ApplicationFailure.nonRetryable(`service ${run.state.run_name} has nothing to roll back to`, FailureType.DeployFailed);
        // The last good spec again, as the next deployment: this Update is its answer.
        const id = (run.deploysAsked += 1);
        run.inbox.push({ kind: 'deploy', id, plan, restore: true });
        const error = await rolloutEnded(run, id);
        run.inbox.push({ kind: 'deploy-answered', id });
        if (error) throw ApplicationFailure.nonRetryable(error, FailureType.DeployFailed);
        return { action, rollout: run.state.service?.rollout ?? null } satisfies RolloutControlResult;
      }
      run.inbox.push({ kind: 'rollout-control', action });
      // The rollout's own Update (applyService) answers it and has it forgotten.
      const id = under?.id;
      if (action === 'rollback' && id !== undefined) await rolloutEnded(run, id);
      else await condition(() => run.state.service?.rollout?.paused === (action === 'pause') || run.state.status !== 'RUNNING');
      return { action, rollout: run.state.service?.rollout ?? null } satisfies RolloutControlResult;
    },
    {
      validator: ({ action }) => {
        refuseWhileHandingOver(run);
        if (action !== 'pause' && action !== 'resume' && action !== 'rollback') throw new Error(`no rollout action "${String(action)}": pause, resume or rollback`);
        const refused = rolloutControlRefusal(run.core, action, stopAsked(run));
        if (refused) throw new Error(refused);
      },
    },
  );
}

/** An apply's answer once the gateways route by the run's table: the deployment, the groups it rolled, each group's replicas now. */
async function answerOnceRouted(run: Run, deployment: number, rolled: readonly number[]): Promise<ApplyServiceResult> {
  await condition(() => routesSettled(run.core) || run.state.status !== 'RUNNING');
  const { groups } = run.core.plan;
  return {
    deployment,
    rolled: rolled.map((g) => groups[g]?.name ?? String(g)),
    groups: groups.map((g) => ({ name: g.name, replicas: groupMembers(run.state.jobs, g.index).length })),
  };
}

/** Until rollout `id` is over (or the run is not RUNNING any more): why it did not go through, or null. */
async function rolloutEnded(run: Run, id: number): Promise<string | null> {
  await condition(() => (run.core.service?.rollout?.id === id && run.core.service.rollout.over) || run.state.status !== 'RUNNING');
  const rollout = run.core.service?.rollout;
  if (rollout?.id !== id || !rollout.over) return `the run ended (${run.state.status}) before the rollback was over`;
  return rollout.error;
}

/** Refusals say what to change; nothing of a refused deployment reaches the run's history. */
function validate(run: Run, plan: Plan): void {
  refuseWhileHandingOver(run);
  if (revertOf(run.core, plan)) {
    const cannot = rolloutControlRefusal(run.core, 'rollback', stopAsked(run));
    if (cannot) throw new Error(cannot);
    return;
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
