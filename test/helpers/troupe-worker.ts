import { bundleWorkflowCode, type WorkflowBundle } from '@temporalio/worker';
import { createActivities, type BackendRegistry } from '../../activities';
import { quietBundler, workflowsPath } from '../../src/worker/create-worker';
import { failureConverterPath } from '../../src/codec/data-converter';
import { startWorker, uniqueTaskQueue } from './temporal';
import { metricsSinks } from '../../src/worker/metrics-sinks';
import { workerMetrics } from '../../src/metrics/troupe-metrics';

let bundle: Promise<WorkflowBundle> | null = null;

/** Troupe's workflows, bundled once per test file. */
export function troupeWorkflowBundle(): Promise<WorkflowBundle> {
  bundle ??= bundleWorkflowCode({ workflowsPath, failureConverterPath, logger: quietBundler });
  return bundle;
}


/** A real worker running Troupe's workflows and activities on a fresh task queue. */
export async function startTroupeWorker(backends: BackendRegistry, taskQueue = uniqueTaskQueue('troupe-test')) {
  const worker = await startWorker({
    taskQueue,
    workflowBundle: await troupeWorkflowBundle(),
    activities: createActivities(backends),
    sinks: metricsSinks(workerMetrics),
  });
  return { ...worker, taskQueue };
}
