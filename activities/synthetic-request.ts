import { probeStatus } from '../src/gateway/replica-probes';
import type { CheckRevisionInput, CheckRevisionResult } from './types';

/**
 * A rollout's gate A (src/run-core/coherent-rollout.ts): a synthetic request to each of the new
 * revision's entry replicas — the new router, which passes it on through the new revision's groups —
 * sent from the worker as a client would send it: the entry group's first probe (its method, headers
 * and body, as the gateway sends its probes: src/gateway/replica-probes.ts), else `GET /`. With a
 * probe a `2xx` passes (as dstack's probes); without one any answer below `500` does (the replica and
 * what it calls answered). A failure is a verdict, not an error of the activity: it names the replica
 * and what came back (the status, or the error), never the body.
 */

/** How long each request may take without a probe's own timeout. */
const DEFAULT_TIMEOUT_S = 30;

export function createSyntheticRequestActivities() {
  return {
    async checkRevision({ urls, probe }: CheckRevisionInput): Promise<CheckRevisionResult> {
      const request = probe ?? { url: '/', method: 'get' as const, headers: [], body: null, timeout_s: DEFAULT_TIMEOUT_S };
      const passes = (status: number) => (probe ? status >= 200 && status < 300 : status < 500);
      const answers = await Promise.all(
        urls.map(async (url) => {
          const started = Date.now();
          try {
            const status = await probeStatus(url, request);
            const took = Date.now() - started;
            return passes(status) ? { url, took, why: null } : { url, took, why: `HTTP ${status} after ${took} ms` };
          } catch (err) {
            const why = err instanceof Error && err.cause instanceof Error ? err.cause.message : err instanceof Error ? err.message : String(err);
            return { url, took: null, why };
          }
        }),
      );
      const what = `${request.method.toUpperCase()} ${request.url}`;
      const failed = answers.find((a) => a.why !== null);
      if (failed) return { error: `${what} to ${failed.url}: ${failed.why}`, note: null };
      const slowest = Math.max(0, ...answers.map((a) => a.took ?? 0));
      return { error: null, note: `${what} passed on ${answers.length} entry replica${answers.length === 1 ? '' : 's'} (slowest ${slowest} ms)` };
    },
  };
}
