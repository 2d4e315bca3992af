import { proxySinks, workflowInfo, type Sinks } from '@temporalio/workflow';

/**
 * What a run tells the worker's metrics (src/metrics/troupe-metrics.ts), through a sink: a sink
 * call is no command and is not in history, and the worker skips it while replaying, so each
 * change is counted once, by the worker that made it.
 */
export interface TroupeMetricsSinks extends Sinks {
  troupeMetrics: {
    runStatus(status: string): void;
    /** Seconds from the run's submission until all of its jobs were RUNNING. */
    launched(seconds: number, backend: string): void;
    /** Nodes of the group given a new attempt by a restart (restart-node, restart-group, a dependency's restart). */
    nodesRestarted(group: string, count: number): void;
    groupResized(group: string, direction: 'up' | 'down'): void;
  };
}

const { troupeMetrics } = proxySinks<TroupeMetricsSinks>();

export const metricsOfRun = troupeMetrics;

/** The first submission of a run's first execution: from the workflow's start to now. */
export function recordLaunch(run: { generation: number; submission: number; backend: string }): void {
  if (run.generation !== 0 || run.submission !== 0) return;
  troupeMetrics.launched((Date.now() - workflowInfo().startTime.getTime()) / 1000, run.backend);
}
