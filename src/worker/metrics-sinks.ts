import type { InjectedSinks } from '@temporalio/worker';
import type { TroupeMetricsSinks } from '../../workflows/run/run-metrics';
import type { TroupeMetrics } from '../metrics/troupe-metrics';

/** The worker's side of the runs' metrics sink: each call counted once, never during replay. */
export function metricsSinks(metrics: TroupeMetrics): InjectedSinks<TroupeMetricsSinks> {
  return {
    troupeMetrics: {
      runStatus: { fn: (_info, status) => metrics.runStatusChanges.inc({ status }), callDuringReplay: false },
      launched: { fn: (_info, seconds, backend) => metrics.launchSeconds.observe({ backend }, seconds), callDuringReplay: false },
      nodesRestarted: { fn: (_info, group, count) => metrics.nodeRestarts.inc({ group }, count), callDuringReplay: false },
      groupResized: { fn: (_info, group, direction) => metrics.resizes.inc({ group, direction }), callDuringReplay: false },
    },
  };
}
