/**
 * Workflow ids, derived in one place so that the CLI, the client SDK and the workflows agree.
 * A run's id comes from its name: a second run of the same name is refused while one is active.
 */

export const RUN_ID_PREFIX = 'run/';

export function runWorkflowId(runName: string): string {
  return `${RUN_ID_PREFIX}${runName}`;
}

export function runNameFromWorkflowId(workflowId: string): string | null {
  return workflowId.startsWith(RUN_ID_PREFIX) && !workflowId.slice(RUN_ID_PREFIX.length).includes('/')
    ? workflowId.slice(RUN_ID_PREFIX.length)
    : null;
}

/**
 * `run/<name>/group/<group>`; resubmissions by `retry` get `#<n>` and the children of a run's
 * later executions (continue-as-new) `@<generation>`, so ids never collide.
 */
export function nodeGroupWorkflowId(runId: string, groupName: string, submission: number, generation = 0): string {
  return `${runId}/group/${groupName}${submission > 0 ? `#${submission}` : ''}${generation > 0 ? `@${generation}` : ''}`;
}

export function fleetWorkflowId(fleetName: string): string {
  return `fleet/${fleetName}`;
}

export function logReaderWorkflowId(runId: string, jobNum: number, nonce: string): string {
  return `${runId}/log/${jobNum}/${nonce}`;
}

export const DEFAULT_TASK_QUEUE = 'troupe';
