import type { SshTarget } from '../src/backends/ssh/target';
import { checkServiceRevision, GatewayAdminError, type GatewayAdmin } from '../src/gateway/admin-client';
import { probeStatus, whyNoAnswer } from '../src/gateway/replica-probes';
import type { RevisionCheck } from '../src/gateway/revision-check';
import { whileHeartbeating } from './heartbeat';
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
 *
 * Users reach the service through the gateways, which may sit elsewhere, reach replicas through tunnels
 * of their own, or not hold the new revision's pool yet: every gateway of this worker (those its tables
 * are pushed to) sends the same request too (`POST /services/<run>/check`, src/gateway/revision-check.ts),
 * judged the same way. A gateway whose table lacks the revision is asked again until its push lands, for
 * a bounded time; any gateway's failure fails the gate, naming it.
 */

/** How long each request may take without a probe's own timeout. */
const DEFAULT_TIMEOUT_S = 30;

/** What of a probe a request takes. */
type Request = Pick<NonNullable<CheckRevisionInput['probe']>, 'url' | 'method' | 'headers' | 'body' | 'timeout_s'>;

/**
 * How long a gateway without the revision in its table (404, 409: its push under way), or not answering,
 * is asked again. Its last try may take a request's longest timeout (300 s) more: both within the
 * 6 minutes the workflow gives the activity.
 */
const DEFAULT_TABLE_WAIT_MS = 45_000;
const TABLE_POLL_MS = 500;

/** What is sent: the entry group's first probe, else `GET /`; only the request's fields (a gateway takes no others). */
const requestOf = (probe: CheckRevisionInput['probe']): Request =>
  probe ? { url: probe.url, method: probe.method, headers: probe.headers, body: probe.body, timeout_s: probe.timeout_s } : { url: '/', method: 'get', headers: [], body: null, timeout_s: DEFAULT_TIMEOUT_S };
const describe = (request: Request): string => `${request.method.toUpperCase()} ${request.url}`;

/** With a probe a `2xx` passes (as dstack's probes); without one any answer below `500`. */
const passesFor =
  (probe: CheckRevisionInput['probe']) =>
  (status: number): boolean =>
    probe ? status >= 200 && status < 300 : status < 500;

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

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
  const passes = passesFor(probe);
  const answers = await Promise.all(
    urls.map(async (url) => {
      const started = Date.now();
      try {
        const status = await statusOf(url, request, jumped.get(addressOf(url)) ?? null);
        const took = Date.now() - started;
        return passes(status) ? { url, took, why: null } : { url, took, why: `HTTP ${status} after ${took} ms` };
      } catch (err) {
        return { url, took: null, why: whyNoAnswer(err) };
      }
    }),
  );
  const failed = answers.find((a) => a.why !== null);
  if (failed) return { error: `${what} to ${failed.url}: ${failed.why}`, note: null };
  const slowest = Math.max(0, ...answers.map((a) => a.took ?? 0));
  return { error: null, note: `${what} passed on ${plural(answers.length, 'entry replica')} (slowest ${slowest} ms)` };
}

/** One gateway's verdict: null, or its first failure (the replica and its status or error, the gateway named; never a body). */
async function gatewayVerdict(gateway: GatewayAdmin, run: string, check: RevisionCheck, passes: (status: number) => boolean, waitMs: number): Promise<{ error: string | null; slowest: number }> {
  const what = describe(check.request);
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      const answer = await checkServiceRevision(gateway, run, check);
      const failed = answer.replicas.find((r) => r.status === null || !passes(r.status));
      if (failed) return { error: `${what} to ${failed.url} through gateway ${gateway.url}: ${failed.status === null ? failed.error : `HTTP ${failed.status} after ${failed.ms} ms`}`, slowest: 0 };
      return { error: null, slowest: Math.max(0, ...answer.replicas.map((r) => r.ms ?? 0)) };
    } catch (err) {
      // No table or not the revision yet (its push under way), or no answer: asked again until the wait is over; a refusal at once.
      const waits = err instanceof GatewayAdminError && (err.failure !== 'refused' || err.status === 404 || err.status === 409);
      const message = err instanceof Error ? err.message : String(err);
      const left = deadline - Date.now();
      if (!waits || left <= 0) return { error: `${what}: ${message}${waits ? ` (asked for ${Math.round(waitMs / 1000)} s)` : ''}`, slowest: 0 };
      await new Promise((resolve) => setTimeout(resolve, Math.min(TABLE_POLL_MS, left)));
    }
  }
}

/** Gate A's verdict through every gateway at once; the first failure in the gateways' order. */
export async function checkThroughGateways(gateways: readonly GatewayAdmin[], run: string, revision: number, probe: CheckRevisionInput['probe'], waitMs = DEFAULT_TABLE_WAIT_MS): Promise<CheckRevisionResult> {
  const check: RevisionCheck = { revision, request: requestOf(probe) };
  const verdicts = await Promise.all(gateways.map((gateway) => gatewayVerdict(gateway, run, check, passesFor(probe), waitMs)));
  const failed = verdicts.find((v) => v.error !== null);
  if (failed) return { error: failed.error, note: null };
  return { error: null, note: `through ${plural(gateways.length, 'gateway')} (slowest ${Math.max(0, ...verdicts.map((v) => v.slowest))} ms)` };
}

export interface SyntheticRequestOptions {
  /** How long a gateway without the revision in its table is asked again; default DEFAULT_TABLE_WAIT_MS. */
  tableWaitMs?: number;
}

/** `gateways`: the worker's, as its tables are pushed to (none: the worker's own request only). */
export function createSyntheticRequestActivities(gateways: readonly GatewayAdmin[] = [], options: SyntheticRequestOptions = {}) {
  const jumps = replicaJumpsOfRuns();
  return {
    // Heartbeating: a worker killed mid-gate (up to a probe's timeout and the gateways' wait) is seen in
    // seconds and the gate tried again by the next one, not after the activity's whole timeout.
    checkRevision: (input: CheckRevisionInput): Promise<CheckRevisionResult> => whileHeartbeating(() => check(input)),
  };
  async function check({ urls, probe, run, revision }: CheckRevisionInput): Promise<CheckRevisionResult> {
    let hosts: Map<string, SshTarget>;
    try {
      hosts = await jumpedHostsOfCaller(jumps, urls);
    } catch (err) {
      // Not a direct request that cannot work: the gate fails, saying why.
      return { error: `${describe(requestOf(probe))} to ${urls[0] ?? 'its entry replicas'}: ${err instanceof Error ? err.message : String(err)}`, note: null };
    }
    const throughGateways = run !== undefined && revision !== undefined && gateways.length > 0;
    const [direct, viaGateways] = await Promise.all([
      checkUrls(urls, probe, hosts),
      throughGateways ? checkThroughGateways(gateways, run, revision, probe, options.tableWaitMs) : null,
    ]);
    if (direct.error !== null || viaGateways === null) return direct;
    if (viaGateways.error !== null) return viaGateways;
    return { error: null, note: `${direct.note ?? ''}, and ${viaGateways.note ?? ''}` };
  }
}
