/**
 * What `troupe stop` says of a run whose workflow was closed from outside Troupe (`temporal
 * workflow terminate`, the Web UI's Terminate, a workflow timeout): the run never reached its own
 * teardown, and the workers' reaper (src/worker/run-reaper.ts) does it instead. Null for a run
 * that ended through Troupe (its teardown ran).
 */
export function closedOutsideNote(temporalStatus: string, agoText: string | null): string | null {
  if (temporalStatus !== 'TERMINATED' && temporalStatus !== 'TIMED_OUT') return null;
  const how = temporalStatus === 'TERMINATED' ? 'terminated in Temporal' : 'timed out in Temporal';
  const when = agoText ? ` (it closed ${agoText} ago)` : '';
  return `Its workflow was ${how}, not stopped through Troupe, so it did not tear itself down: every worker's reaper stops its jobs and releases its nodes, users and files within a minute of its end${when}.`;
}
