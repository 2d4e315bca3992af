import { setCurrentDetails } from '@temporalio/workflow';
import { rolloutLine, runDetails } from '../../src/run-core/details';
import type { Run } from './run-context';

/** The newest steps of a rollout shown (a long one keeps its last ones). */
const STEPS_SHOWN = 20;

/** What the Web UI shows of the run: src/run-core/details.ts, set when it changes; a rollout's steps logged as they change, with the time. */
export function showDetails(run: Run): void {
  const { details } = run;
  const rollout = run.state.service?.rollout ?? null;
  const line = rolloutLine(rollout);
  if (rollout && line !== null && line !== details.lastLine) {
    // A new deployment's rollout starts its own list.
    const steps = rollout.deployment === details.deployment ? details.steps : [];
    details.steps = [...steps, `${new Date(Date.now()).toISOString().slice(11, 19)} ${line}`].slice(-STEPS_SHOWN);
    details.lastLine = line;
    details.deployment = rollout.deployment;
  }
  const text = runDetails(run.core, details.steps);
  if (text === details.shown) return;
  details.shown = text;
  setCurrentDetails(text);
}
