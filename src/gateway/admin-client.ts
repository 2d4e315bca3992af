import { z } from 'zod';
import { ServiceFiguresSchema, type ServiceFigures } from './figures';
import { RevisionCheckAnswerSchema, type RevisionCheck, type RevisionCheckAnswer } from './revision-check';
import { GatewayInfoSchema, type GatewayInfo, type ServiceTableInput } from './routing-table';

const InflightAnswerSchema = z.object({ replicas: z.array(z.object({ url: z.string(), inflight: z.number().int().nonnegative() })) });

/**
 * A client of a gateway's admin API (admin-plane.ts), for the worker's activities. Its errors name the
 * gateway's admin URL and what it answered, never the admin token: they end up in a run's history.
 */

/** A gateway's admin API and the bearer token it wants. */
export interface GatewayAdmin {
  /** `http://HOST:PORT`, as `troupe gateway --admin` listens. */
  url: string;
  token: string;
}

/** Each call's limit, connecting included: a gateway that does not answer in it counts as unreachable. */
export const DEFAULT_ADMIN_TIMEOUT_MS = 5_000;

/**
 * Why a call failed. `unreachable` (no answer, or a timeout) and `server` (5xx) may pass on a retry;
 * `refused` (a 4xx: a bad table, a wrong token) will not until the table or the worker's settings change.
 */
export type GatewayAdminFailure = 'unreachable' | 'server' | 'refused';

export class GatewayAdminError extends Error {
  constructor(
    readonly adminUrl: string,
    readonly failure: GatewayAdminFailure,
    readonly status: number | null,
    message: string,
  ) {
    super(message);
    this.name = 'GatewayAdminError';
  }
}

/** A gateway's answer is shown at most this long: its errors are one line, anything longer is not its own. */
const SHOWN_BODY_CHARS = 500;

function base(admin: GatewayAdmin): string {
  return admin.url.replace(/\/+$/, '');
}

/** Text to show, with the token cut out should anything have echoed it. */
function scrubbed(admin: GatewayAdmin, text: string): string {
  return admin.token.length > 0 ? text.split(admin.token).join('<admin token>') : text;
}

/** The gateway's `{"error": …}`, or the start of whatever else it answered. */
function errorText(body: string): string {
  try {
    const parsed: unknown = JSON.parse(body);
    if (parsed && typeof parsed === 'object' && typeof (parsed as { error?: unknown }).error === 'string') return (parsed as { error: string }).error;
  } catch {
    // Not JSON: shown as it came.
  }
  const line = body.trim().replace(/\s+/g, ' ');
  return line.length > SHOWN_BODY_CHARS ? `${line.slice(0, SHOWN_BODY_CHARS)}…` : line;
}

function causeOf(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  if (err.name === 'TimeoutError') return 'no answer in time';
  const cause = (err as { cause?: unknown }).cause;
  const code = cause instanceof Error ? (cause as NodeJS.ErrnoException).code : undefined;
  return code ?? (cause instanceof Error ? cause.message : err.message);
}

async function call(admin: GatewayAdmin, method: string, path: string, body: unknown, timeoutMs: number): Promise<{ status: number; text: string }> {
  const url = `${base(admin)}${path}`;
  try {
    const res = await fetch(url, {
      method,
      headers: { authorization: `Bearer ${admin.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(timeoutMs),
    });
    return { status: res.status, text: await res.text() };
  } catch (err) {
    const why = err instanceof Error && err.name === 'TimeoutError' ? `no answer in ${timeoutMs} ms` : causeOf(err);
    throw new GatewayAdminError(admin.url, 'unreachable', null, scrubbed(admin, `gateway ${admin.url}: ${method} ${path} got no answer (${why})`));
  }
}

function failed(admin: GatewayAdmin, method: string, path: string, res: { status: number; text: string }): GatewayAdminError {
  const failure: GatewayAdminFailure = res.status >= 500 ? 'server' : 'refused';
  return new GatewayAdminError(admin.url, failure, res.status, scrubbed(admin, `gateway ${admin.url}: ${method} ${path} answered ${res.status}: ${errorText(res.text)}`));
}

/** A 200's body as `schema` wants it; undefined when it is not (not JSON, or not a Troupe gateway's answer). */
function answerOf<T>(schema: z.ZodType<T>, text: string): T | undefined {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = schema.safeParse(data);
  return parsed.success ? parsed.data : undefined;
}

/** Where the gateway serves: its data plane's URL and its domain. */
export async function gatewayInfo(admin: GatewayAdmin, timeoutMs = DEFAULT_ADMIN_TIMEOUT_MS): Promise<GatewayInfo> {
  const res = await call(admin, 'GET', '/info', undefined, timeoutMs);
  if (res.status !== 200) throw failed(admin, 'GET', '/info', res);
  const info = answerOf(GatewayInfoSchema, res.text);
  // A 200 that is not a gateway's answer: something else listens there, which a retry will not change.
  if (info === undefined) throw new GatewayAdminError(admin.url, 'refused', 200, scrubbed(admin, `gateway ${admin.url}: GET /info answered something that is not a Troupe gateway's: ${errorText(res.text)}`));
  return info;
}

/**
 * Replaces the run's table. `stale`: the gateway holds a newer generation already, which is the
 * caller's goal reached by another push.
 */
export async function putServiceTable(admin: GatewayAdmin, table: ServiceTableInput, timeoutMs = DEFAULT_ADMIN_TIMEOUT_MS): Promise<{ stale: boolean }> {
  const path = `/services/${encodeURIComponent(table.run)}`;
  const res = await call(admin, 'PUT', path, table, timeoutMs);
  if (res.status === 200) return { stale: false };
  if (res.status === 409) return { stale: true };
  throw failed(admin, 'PUT', path, res);
}

/** Removes the run's table; a gateway that has none for it is as good. */
export async function deleteServiceTable(admin: GatewayAdmin, run: string, timeoutMs = DEFAULT_ADMIN_TIMEOUT_MS): Promise<void> {
  const path = `/services/${encodeURIComponent(run)}`;
  const res = await call(admin, 'DELETE', path, undefined, timeoutMs);
  if (res.status === 200 || res.status === 404) return;
  throw failed(admin, 'DELETE', path, res);
}

/** Requests in flight to each replica of the run on this gateway, by replica URL (none: the gateway has no table of the run). */
export async function serviceInflight(admin: GatewayAdmin, run: string, timeoutMs = DEFAULT_ADMIN_TIMEOUT_MS): Promise<Map<string, number>> {
  const path = `/services/${encodeURIComponent(run)}/inflight`;
  const res = await call(admin, 'GET', path, undefined, timeoutMs);
  if (res.status === 404) return new Map();
  if (res.status !== 200) throw failed(admin, 'GET', path, res);
  const answer = answerOf(InflightAnswerSchema, res.text);
  if (answer === undefined) throw new GatewayAdminError(admin.url, 'refused', 200, `gateway ${admin.url}: GET ${path} answered something that is not a Troupe gateway's`);
  const counts = new Map<string, number>();
  for (const row of answer.replicas) counts.set(row.url, (counts.get(row.url) ?? 0) + row.inflight);
  return counts;
}

/**
 * The service's figures on this gateway over the last `windowS` seconds (1..300): per revision and
 * entry group, for rollout gates and autoscaling. null: the gateway has no table of the run.
 */
export async function serviceFigures(admin: GatewayAdmin, run: string, windowS: number, timeoutMs = DEFAULT_ADMIN_TIMEOUT_MS): Promise<ServiceFigures | null> {
  const path = `/services/${encodeURIComponent(run)}/figures?window=${windowS}`;
  const res = await call(admin, 'GET', path, undefined, timeoutMs);
  if (res.status === 404) return null;
  if (res.status !== 200) throw failed(admin, 'GET', path, res);
  const figures = answerOf(ServiceFiguresSchema, res.text);
  if (figures === undefined) throw new GatewayAdminError(admin.url, 'refused', 200, `gateway ${admin.url}: GET ${path} answered something that is not a Troupe gateway's`);
  return figures;
}

/**
 * A rollout's gate A sent by the gateway to each ready entry replica of `check.revision` in its table of
 * `run` (revision-check.ts): their statuses, judged by the caller. The call's limit is the request's own
 * timeout and DEFAULT_ADMIN_TIMEOUT_MS more. A gateway with no table of the run (404) or without the
 * revision's ready entry replicas in it (409: its push not landed yet) fails as `refused` with that status.
 */
export async function checkServiceRevision(admin: GatewayAdmin, run: string, check: RevisionCheck): Promise<RevisionCheckAnswer> {
  const path = `/services/${encodeURIComponent(run)}/check`;
  const res = await call(admin, 'POST', path, check, check.request.timeout_s * 1000 + DEFAULT_ADMIN_TIMEOUT_MS);
  if (res.status !== 200) throw failed(admin, 'POST', path, res);
  const answer = answerOf(RevisionCheckAnswerSchema, res.text);
  if (answer === undefined) throw new GatewayAdminError(admin.url, 'refused', 200, `gateway ${admin.url}: POST ${path} answered something that is not a Troupe gateway's`);
  return answer;
}
