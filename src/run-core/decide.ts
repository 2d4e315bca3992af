import type { Decision } from './effects';
import type { RunEvent } from './events';
import { decideHealing } from './healing';
import { decideOutcome } from './outcome';
import { decidePeers } from './peers';
import { decideScaling } from './scaling';
import type { RunCore } from './state';

/**
 * Every policy of the run, in order, over one event: healing first (a node it replaces has not
 * failed the run), scaling (a failed node it added undoes its resize), the outcome, then the
 * live address book. Each sees the state the one before returned; their effects
 * are carried out in the same order.
 */
export function decideRun(core: RunCore, event: RunEvent, now: number): Decision<RunCore> {
  const healing = decideHealing(core, event, now);
  const scaling = decideScaling(healing.state, event, now);
  const outcome = decideOutcome(scaling.state, event, now);
  // The book goes out once the outcome is known: a submission that ended publishes nothing more.
  const peers = decidePeers(outcome.state, event, now);
  return { state: peers.state, effects: [...healing.effects, ...scaling.effects, ...outcome.effects, ...peers.effects] };
}
