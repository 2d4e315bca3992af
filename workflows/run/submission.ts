import type { CancellationScope, ChildWorkflowHandle } from '@temporalio/workflow';
import type { NodeGroupWorkflow } from '../node-group/node-group-workflow';

/** One submission's group children, started together and cancelled together. */
export interface Submission {
  scope: CancellationScope;
  children: ChildWorkflowHandle<typeof NodeGroupWorkflow>[];
  /** Settle when each child has ended (a cancelled child's end is not a failure). */
  childResults: Promise<void>[];
  /** Jobs already told they may start. */
  signalled: Set<number>;
  /** Signals sent but not yet awaited. */
  delivered: Promise<unknown> | null;
  /** The launch (every job RUNNING) is counted, or was before this execution took over. */
  launchRecorded: boolean;
}

