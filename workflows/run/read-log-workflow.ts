import { proxyActivities } from '@temporalio/workflow';
import type { LogChunk } from '../../src/backends/backend';
import type { TroupeActivities } from '../../activities';
import type { ReadLogInput } from '../../activities/types';

const { readJobLog } = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 3 },
});

/**
 * Reads a chunk of a job's log through the backend, on whichever worker picks it up: the log
 * stays on the node, and the CLI can run on another machine than the workers.
 */
export async function ReadJobLogWorkflow(input: ReadLogInput): Promise<LogChunk> {
  return await readJobLog(input);
}
