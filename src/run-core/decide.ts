import type { Decision } from './effects';
import type { RunEvent } from './events';
import { autoscaleDeadline, decideAutoscaling } from './autoscaling';
import { decideDeployment } from './deployment';
import { rolloutDeadline } from './coherent-rollout';
import { decideHealing } from './healing';
import { decideOutcome, nextDeadline as outcomeDeadline } from './outcome';
import { decideRouting, routingDeadline } from './routing';
import { decidePeers } from './peers';
import { decideScaling } from './scaling';
import type { RunCore } from './state';

/**
 * Every policy of the run, in order, over one event: healing first (a node it replaces has not
 * failed the run), scaling (a failed node it added undoes its resize), a service's deployment and
 * autoscaler, the outcome, then the
 * live address book and a service's routing table. Each sees the state the one before returned;
 * their effects are carried out in the same order.
 */
export function decideRun(core: RunCore, event: RunEvent, now: number): Decision<RunCore> {
  const healing = decideHealing(core, event, now);
  const scaling = decideScaling(healing.state, event, now);
  // A deployment's steps are resizes: after scaling has looked at the ones under way.
  const deployment = decideDeployment(scaling.state, event, now);
  // The autoscaler after the deployment: while a rollout is under way its resizes are the rollout's targets.
  const autoscaling = decideAutoscaling(deployment.state, event, now);
  const outcome = decideOutcome(autoscaling.state, event, now);
  // The book goes out once the outcome is known: a submission that ended publishes nothing more.
  const peers = decidePeers(outcome.state, event, now);
  // After the outcome too: a submission that ended routes no new request to its replicas.
  const routing = decideRouting(peers.state, event, now);
  return {
    state: routing.state,
    effects: [...healing.effects, ...scaling.effects, ...deployment.effects, ...autoscaling.effects, ...outcome.effects, ...peers.effects, ...routing.effects],
  };
}

/** When the loop must look again without an event (epoch ms), or null: the earliest of the policies' deadlines. */
export function nextDeadline(core: RunCore): number | null {
  const due = [outcomeDeadline(core), routingDeadline(core), rolloutDeadline(core), autoscaleDeadline(core)].filter((d): d is number => d !== null);
  return due.length === 0 ? null : Math.min(...due);
}
