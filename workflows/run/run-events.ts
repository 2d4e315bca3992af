import type { Effect } from '../../src/run-core/effects';
import type { RunEvent } from '../../src/run-core/events';
import { decideRun } from '../../src/run-core/decide';
import { announceStatus, type Run } from './run-context';
import { askNewAttempts } from './run-attempts';
import { attemptRefsOf } from './run-job-refs';
import { publishPeers } from './run-peers';
import { drainReplicas, pushRoutes, readFigures, readReplicaMetrics, checkRevision } from './run-routes';
import { releaseRemoved } from './run-scaling';

/**
 * How events reach the run's core and its effects the world: the run's loop (run-loop.ts) and its
 * hand-over (run-handover.ts) take events only through these.
 */

/** The events queued so far, oldest first, each through the run's core and its effects carried out. */
export function takeEvents(run: Run): void {
  for (const event of run.inbox.splice(0)) feed(run, event);
}

/** One event through the run's core. */
export function feed(run: Run, event: RunEvent): void {
  const { state, effects } = decideRun(run.core, event, Date.now());
  run.core = state;
  effects.forEach((effect) => apply(run, effect));
}

function apply(run: Run, effect: Effect): void {
  switch (effect.kind) {
    case 'set-status':
      announceStatus(run, effect.status, true);
      break;
    case 'give-back': {
      // Given back by the loop's next pass, or by the next execution (a run that is not live never replaces an attempt).
      run.live?.unwanted.push(...attemptRefsOf(run, [effect]));
      break;
    }
    case 'new-attempts':
      if (run.submissionNow) askNewAttempts(run, run.submissionNow, effect);
      break;
    case 'release':
      releaseRemoved(run, effect);
      break;
    case 'publish-peers':
      publishPeers(run, effect);
      break;
    case 'push-routes':
      pushRoutes(run, effect);
      break;
    case 'drain':
      drainReplicas(run, effect);
      break;
    case 'read-figures':
      readFigures(run, effect);
      break;
    case 'read-replica-metrics':
      readReplicaMetrics(run, effect);
      break;
    case 'check-revision':
      checkRevision(run, effect);
      break;
    case 'end-submission':
      // The submission's end is read from the core by the loop; teardown carries it out.
      break;
    case 'resubmit':
    case 'finish':
      // Decided after teardown, and carried out by the run's story (run-workflow.ts).
      break;
  }
}

