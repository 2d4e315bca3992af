import type { CheckRevisionInput, CheckRevisionResult } from './types';

/**
 * A rollout's gate A (src/run-core/coherent-rollout.ts): a synthetic request to each of the new
 * revision's entry replicas — the new router, which passes it on through the new revision's groups —
 * sent from the worker as a client would send it: the entry group's first probe (its method, headers
 * and body), else `GET /`. With a probe a `2xx` passes (as dstack's probes); without one any answer
 * below `500` does (the replica and what it calls answered). A failure is a verdict, not an error of
 * the activity: it names the replica and what came back (the status, or the error), never the body.
 */

/** How long each request may take without a probe's own timeout. */
const DEFAULT_TIMEOUT_S = 30;

export function createSyntheticRequestActivities() {
  return {
    async checkRevision({ urls, probe }: CheckRevisionInput): Promise<CheckRevisionResult> {
      const timeout_s = probe?.timeout_s ?? DEFAULT_TIMEOUT_S;
      const path = probe?.url ?? '/';
      const passes = (status: number) => (probe ? status >= 200 && status < 300 : status < 500);
      const answers = await Promise.all(
        urls.map(async (url) => {
          const started = Date.now();
          const headers = new Headers();
          for (const h of probe?.headers ?? []) headers.append(h.name, h.value);
          try {
            const res = await fetch(`${url}${path}`, {
              method: (probe?.method ?? 'get').toUpperCase(),
              headers,
              body: probe?.body ?? null,
              redirect: 'manual',
              signal: AbortSignal.timeout(timeout_s * 1000),
            });
            await res.arrayBuffer();
            const took = Date.now() - started;
            return passes(res.status) ? { url, ok: true, took } : { url, ok: false, why: `HTTP ${res.status} after ${took} ms` };
          } catch (err) {
            const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : err instanceof Error ? err.message : String(err);
            return { url, ok: false, why: cause };
          }
        }),
      );
      const what = `${probe ? `${probe.method.toUpperCase()} ${path}` : 'GET /'}`;
      const failed = answers.find((a) => !a.ok);
      if (failed) return { error: `${what} to ${failed.url}: ${'why' in failed ? failed.why : 'failed'}`, note: null };
      const slowest = Math.max(0, ...answers.map((a) => ('took' in a ? (a.took ?? 0) : 0)));
      return { error: null, note: `${what} passed on ${answers.length} entry replica${answers.length === 1 ? '' : 's'} (slowest ${slowest} ms)` };
    },
  };
}
