import type { SshTarget } from '../src/backends/ssh/target';
import { probeStatus } from '../src/gateway/replica-probes';
import { addressOf, closeThroughJump, dispatcherThroughJump, jumpedHostsOfCaller, replicaJumpsOfRuns } from './replica-jumps';
import type { CheckRevisionInput, CheckRevisionResult } from './types';

/**
 * A rollout's gate A (src/run-core/coherent-rollout.ts): a synthetic request to each of the new
 * revision's entry replicas — the new router, which passes it on through the new revision's groups —
 * sent from the worker as a client would send it: the entry group's first probe (its method, headers
 * and body, as the gateway sends its probes: src/gateway/replica-probes.ts), else `GET /`. With a
 * probe a `2xx` passes (as dstack's probes); without one any answer below `500` does (the replica and
 * what it calls answered). A failure is a verdict, not an error of the activity: it names the replica
 * and what came back (the status, or the error), never the body. A replica on an SSH host behind its
 * fleet's proxy_jump (a private network the worker has no route to) is sent its request through the
 * jump host, as its metrics are read (replica-jumps.ts), within the same timeout.
 */

/** How long each request may take without a probe's own timeout. */
const DEFAULT_TIMEOUT_S = 30;

/** What of a probe a request takes. */
type Request = Pick<NonNullable<CheckRevisionInput['probe']>, 'url' | 'method' | 'headers' | 'body' | 'timeout_s'>;

/** What is sent: the entry group's first probe, else `GET /`. */
const requestOf = (probe: CheckRevisionInput['probe']): Request => probe ?? { url: '/', method: 'get', headers: [], body: null, timeout_s: DEFAULT_TIMEOUT_S };
const describe = (request: Request): string => `${request.method.toUpperCase()} ${request.url}`;

/** One request to `url` (through the jump host of `jumped` where there is one): its status, bounded by the request's timeout, the tunnel's opening included. */
async function statusOf(url: string, request: Request, jumped: SshTarget | null): Promise<number> {
  if (!jumped) return await probeStatus(url, request);
  const timeoutMs = request.timeout_s * 1000;
  const signal = AbortSignal.timeout(timeoutMs);
  const dispatcher = dispatcherThroughJump(url, jumped, timeoutMs, signal);
  try {
    return await probeStatus(url, request, signal, dispatcher);
  } finally {
    closeThroughJump(dispatcher);
  }
}

/** Gate A's verdict on `urls`: those whose address is in `jumped` sent through that host's jump host, the others directly. */
export async function checkUrls(urls: readonly string[], probe: CheckRevisionInput['probe'], jumped: ReadonlyMap<string, SshTarget>): Promise<CheckRevisionResult> {
  const request = requestOf(probe);
  const what = describe(request);
  const passes = (status: number) => (probe ? status >= 200 && status < 300 : status < 500);
  const answers = await Promise.all(
    urls.map(async (url) => {
      const started = Date.now();
      try {
        const status = await statusOf(url, request, jumped.get(addressOf(url)) ?? null);
        const took = Date.now() - started;
        return passes(status) ? { url, took, why: null } : { url, took, why: `HTTP ${status} after ${took} ms` };
      } catch (err) {
        const why = err instanceof Error && err.cause instanceof Error ? err.cause.message : err instanceof Error ? err.message : String(err);
        return { url, took: null, why };
      }
    }),
  );
  const failed = answers.find((a) => a.why !== null);
  if (failed) return { error: `${what} to ${failed.url}: ${failed.why}`, note: null };
  const slowest = Math.max(0, ...answers.map((a) => a.took ?? 0));
  return { error: null, note: `${what} passed on ${answers.length} entry replica${answers.length === 1 ? '' : 's'} (slowest ${slowest} ms)` };
}

export function createSyntheticRequestActivities() {
  const jumps = replicaJumpsOfRuns();
  return {
    async checkRevision({ urls, probe }: CheckRevisionInput): Promise<CheckRevisionResult> {
      let hosts: Map<string, SshTarget>;
      try {
        hosts = await jumpedHostsOfCaller(jumps, urls);
      } catch (err) {
        // Not a direct request that cannot work: the gate fails, saying why.
        return { error: `${describe(requestOf(probe))} to ${urls[0] ?? 'its entry replicas'}: ${err instanceof Error ? err.message : String(err)}`, note: null };
      }
      return await checkUrls(urls, probe, hosts);
    },
  };
}
