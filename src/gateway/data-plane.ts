import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Socket } from 'node:net';
import { checkBearer, type AuthVerdict } from './token-auth';
import { chooseReplica, chooseRevision } from './replica-choice';
import type { GatewayMetrics, ReplicaMetrics } from './gateway-metrics';
import type { Entry, EntryCandidate, GatewayServices, ServedService } from './gateway-services';
import type { ServiceWindow } from './figures';
import type { RateVerdict } from './rate-limit';
import type { ServiceTable } from './routing-table';

/**
 * The data plane: every request of every service, `/services/<run>/…` or `Host: <run>.<domain>`.
 * Forwarding is undici's (`Pool.dispatch`, with the handler below): bodies stream both ways, a chunked
 * or SSE answer goes out chunk by chunk as it arrives, with backpressure (the replica's socket paused
 * while the client's is full). What is Troupe's own is the choice: which service, which replica, and
 * the service's auth and rate limits. `dispatch` rather than `stream`: no Readable, AbortController or
 * promise per request — the data plane's CPU per request is what bounds its throughput (BENCHMARKS.md §7).
 */

export interface DataPlaneOptions {
  /** `<run>.<domain>` Host headers name a service; none: path routing only. */
  domain?: string | undefined;
  /**
   * Where the rate limits' buckets are when they are not this process's: a clustered gateway's workers
   * ask the primary, so a limit holds across them. Rejects when it cannot answer.
   */
  sharedRates?: ((run: string, path: string, key: string) => Promise<RateVerdict>) | undefined;
}

/** Headers meant for one hop only (RFC 9110 §7.6.1), and the Host undici sets for the replica. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'http2-settings']);
const NOT_FORWARDED = new Set([...HOP_BY_HOP, 'host', 'expect']);

/** The answer's header naming the revision that served it: a client (or a rollout's check) sees which one did. */
export const REVISION_HEADER = 'troupe-revision';

/** Errors of a connection that never opened: nothing was sent, another replica may take the request. */
const CONNECT_ERRORS = new Set(['ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EADDRNOTAVAIL']);

interface Route {
  run: string;
  /** The path and query as the service sees them (what rate limits match and strip_prefix sends). */
  servicePath: string;
  /** `/services/<run>` for path routing, '' for Host routing. */
  prefix: string;
}

function hostName(header: string | undefined): string | undefined {
  return header?.trim().replace(/:\d{1,5}$/, '').replace(/\.$/, '').toLowerCase();
}

export function routeOf(url: string, host: string | undefined, domain: string | undefined): Route | undefined {
  const suffix = domain !== undefined ? `.${domain.toLowerCase()}` : undefined;
  const name = suffix !== undefined ? hostName(host) : undefined;
  if (suffix !== undefined && name !== undefined && name.endsWith(suffix)) {
    const run = name.slice(0, -suffix.length);
    if (run.length > 0 && !run.includes('.')) return { run, servicePath: url, prefix: '' };
  }
  const match = /^\/services\/([^/?#]+)(.*)$/s.exec(url);
  if (!match) return undefined;
  const run = match[1] as string;
  const rest = match[2] as string;
  return { run, servicePath: rest.startsWith('/') ? rest : `/${rest}`, prefix: `/services/${run}` };
}

/** Names listed in a `Connection` header (hop-by-hop too); none for the usual `keep-alive` or `close`. */
function connectionTokens(value: string | string[] | undefined): ReadonlySet<string> {
  if (value === undefined || value === 'keep-alive' || value === 'close') return NO_NAMES;
  return new Set(String(value).split(',').map((t) => t.trim().toLowerCase()).filter((t) => t.length > 0));
}

const NO_NAMES: ReadonlySet<string> = new Set();

function requestHeaders(req: IncomingMessage, route: Route, strip: boolean): Record<string, string | string[]> {
  const given = req.headers;
  const named = connectionTokens(given.connection);
  const out: Record<string, string | string[]> = {};
  for (const name in given) {
    const value = given[name];
    if (value === undefined || NOT_FORWARDED.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  const client = req.socket.remoteAddress ?? '';
  const prior = given['x-forwarded-for'];
  out['x-forwarded-for'] = prior ? `${Array.isArray(prior) ? prior.join(', ') : prior}, ${client}` : client;
  out['x-forwarded-proto'] = 'http';
  if (given.host !== undefined) out['x-forwarded-host'] = given.host;
  if (strip && route.prefix) out['x-forwarded-prefix'] = route.prefix;
  return out;
}

function responseHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const named = connectionTokens(headers.connection);
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || HOP_BY_HOP.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return out;
}

function answer(res: ServerResponse, status: number, reason: string, extra: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json', ...extra });
  res.end(`${JSON.stringify({ error: reason })}\n`);
}

function hasBody(req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0');
}

function errorCode(err: unknown): string | undefined {
  if (!(err instanceof Error)) return undefined;
  const code = (err as NodeJS.ErrnoException).code;
  const cause = (err as { cause?: unknown }).cause;
  return CONNECT_ERRORS.has(code ?? '') ? code : cause instanceof Error ? ((cause as NodeJS.ErrnoException).code ?? code) : code;
}

function rateKey(req: IncomingMessage, key: ServiceTable['rate_limits'][number]['key']): string {
  if (key.type === 'ip_address') return req.socket.remoteAddress ?? '';
  const value = req.headers[key.header.toLowerCase()];
  return Array.isArray(value) ? value.join(',') : (value ?? '');
}

/**
 * The Authorization header each connection last passed with, and the hashes it passed against: a
 * keep-alive client's token is hashed once per connection and table, not on every request. Only a pass
 * is kept, and a new table (new hashes) checks again.
 */
const passedOn = new WeakMap<Socket, { header: string; hashes: readonly string[] }>();

function authVerdict(req: IncomingMessage, hashes: readonly string[] | null): AuthVerdict {
  if (hashes === null) return 'pass';
  const header = req.headers.authorization;
  const passed = passedOn.get(req.socket);
  if (header !== undefined && passed !== undefined && passed.hashes === hashes && passed.header === header) return 'pass';
  const verdict = checkBearer(header, hashes);
  if (verdict === 'pass' && header !== undefined) passedOn.set(req.socket, { header, hashes });
  return verdict;
}

const secondsSince = (t0: number) => (performance.now() - t0) / 1000;

/** One request on its way to a replica: what its attempts share. */
class Exchange {
  /** The client went away before its answer was complete. */
  gone = false;
  /** The attempt under way. */
  current: Attempt | null = null;
  /** Replica URLs that refused the connection. */
  readonly tried = new Set<string>();
  readonly startedAt = performance.now();
  readonly streamsBody: boolean;
  readonly window: ServiceWindow;

  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly served: ServedService,
    /** The revision it goes to, whichever replica takes it: a request never crosses revisions. */
    readonly entry: Entry,
    readonly path: string,
    readonly headers: Record<string, string | string[]>,
    readonly services: GatewayServices,
    readonly metrics: GatewayMetrics,
  ) {
    this.streamsBody = hasBody(req);
    this.window = services.window(served.table.run);
    res.once('close', () => {
      if (res.writableFinished) return;
      this.gone = true;
      this.current?.clientGone();
    });
  }
}

class ClientGoneError extends Error {
  constructor() {
    super('the client went away');
  }
}

/**
 * One try of a request on one replica: undici's handler for it. Counted in flight from its start until
 * its answer ended, it failed, or the client went away.
 */
class Attempt implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | null = null;
  private readonly m: ReplicaMetrics;
  private left = false;
  private responded = false;
  private bodyStarted = false;

  constructor(
    private readonly x: Exchange,
    private readonly candidate: EntryCandidate,
    private readonly last: boolean,
  ) {
    this.m = x.metrics.of(candidate.key, x.served.table.run, x.entry.revision, candidate.group, candidate.replica.url);
    x.services.enter(candidate.key);
    x.current = this;
  }

  send(): void {
    const { x } = this;
    x.services.pool(this.candidate.origin, this.candidate.replica.via).dispatch({ path: x.path, method: (x.req.method ?? 'GET') as Dispatcher.HttpMethod, headers: x.headers, body: x.streamsBody ? Readable.from(this.body(), { objectMode: false }) : null }, this);
  }

  // A lazy stream over req, not req itself: undici pulls from it only once connected, so after a connect
  // error the request body is untouched and another replica can have it.
  private async *body(): AsyncGenerator<Buffer> {
    this.bodyStarted = true;
    for await (const chunk of this.x.req) yield chunk as Buffer;
  }

  clientGone(): void {
    this.leave();
    this.controller?.abort(new ClientGoneError());
  }

  private leave(): void {
    if (this.left) return;
    this.left = true;
    this.x.services.leave(this.candidate.key);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.x.gone) controller.abort(new ClientGoneError());
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200) return; // 1xx: informational, the final answer follows
    const { res } = this.x;
    this.responded = true;
    this.m.firstByte(secondsSince(this.x.startedAt));
    const forwarded = responseHeaders(headers);
    forwarded[REVISION_HEADER] = String(this.x.entry.revision);
    res.writeHead(statusCode, forwarded);
    // An answer of unknown length (SSE, chunked) shows its headers at once, before its first
    // event; one of known length goes out with its body in one write.
    if (forwarded['content-length'] === undefined) res.flushHeaders();
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const { res } = this.x;
    if (!res.write(chunk) && !res.destroyed) {
      controller.pause();
      res.once('drain', () => controller.resume());
    }
  }

  onResponseEnd(): void {
    const { res } = this.x;
    res.end();
    this.leave();
    this.m.answered(res.statusCode);
    const seconds = secondsSince(this.x.startedAt);
    this.m.ended(seconds);
    this.x.window.ended(this.x.entry.revision, res.statusCode >= 500, seconds * 1000, Date.now());
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.leave();
    const { x, candidate } = this;
    const code = errorCode(err);
    if (!this.responded && !this.bodyStarted && !this.last && code !== undefined && CONNECT_ERRORS.has(code) && !x.gone) {
      this.m.failed('connect_retried');
      x.tried.add(candidate.replica.url);
      const next = chooseReplica(x.entry.candidates, (c) => x.services.inflightOf(c.key), x.services.nextTurn(), x.tried);
      if (next) {
        new Attempt(x, next, true).send();
        return;
      }
    }
    const reason = x.gone ? 'client_gone' : this.responded ? 'upstream_broke' : code !== undefined && CONNECT_ERRORS.has(code) ? 'connect' : 'upstream';
    this.m.failed(reason);
    // A client that went away is no error of the service's; a request the replica failed or broke is.
    x.window.ended(x.entry.revision, !x.gone, null, Date.now());
    if (x.gone) return;
    this.m.answered(this.responded ? x.res.statusCode : 502);
    if (this.responded) x.res.destroy();
    else answer(x.res, 502, `replica ${candidate.replica.url} of group "${candidate.group}" failed: ${code ?? err.message}`, { [REVISION_HEADER]: String(x.entry.revision) });
  }
}

/** Why a request found no replica: each revision's entry groups, the current one's first. */
function noneReady(served: ServedService): string {
  const where = served.entries.map((e) => `group ${e.groups.map((g) => `"${g}"`).join(', ') || '(none)'} of revision ${e.revision}`);
  return `no ready replica in ${where.join(' or ')} of service "${served.table.run}"`;
}

export function dataPlaneHandler(services: GatewayServices, metrics: GatewayMetrics, options: DataPlaneOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const load = (c: EntryCandidate) => services.inflightOf(c.key);
  return (req, res) => {
    const url = req.url ?? '/';
    const route = routeOf(url, req.headers.host, options.domain);
    const served = route ? services.get(route.run) : undefined;
    if (!route || !served) {
      answer(res, 404, route ? `no service "${route.run}" on this gateway` : 'not a service address: use /services/<run>/…');
      return;
    }
    const { table, limiter } = served;
    const refuse = (status: number, reason: string, why: string, extra: Record<string, string> = {}) => {
      const m = metrics.of(`${table.run}\0${table.current_revision}`, table.run, table.current_revision, '', '');
      m.answered(status);
      m.failed(why);
      answer(res, status, reason, extra);
    };
    const verdict = authVerdict(req, table.auth?.token_sha256 ?? null);
    if (verdict === 'missing') return refuse(401, `service "${table.run}" wants a token: Authorization: Bearer <token>`, 'unauthenticated', { 'www-authenticate': 'Bearer' });
    if (verdict === 'wrong') return refuse(403, `this token does not open service "${table.run}"`, 'forbidden');
    const forward = (now: ServedService) => {
      const roll = Math.random() * 100;
      // No revision with a replica whose probes pass: the one with a ready replica all the same (chooseReplica's panic).
      const entry = chooseRevision(now.entries, roll) ?? chooseRevision(now.entries.map((e) => ({ ...e, ready: e.listed })), roll);
      const first = entry && chooseReplica(entry.candidates, load, services.nextTurn());
      if (!entry || !first) return hold(now);
      const strip = now.table.strip_prefix;
      const exchange = new Exchange(req, res, now, entry, strip ? route.servicePath : url, requestHeaders(req, route, strip), services, metrics);
      exchange.window.arrived(entry.revision, first.group, Date.now());
      new Attempt(exchange, first, false).send();
    };
    // Nothing ready in any revision: a 503 at once, or with the table's hold_s, a wait for a table that brings a replica.
    const hold = (now: ServedService) => {
      const holdS = now.table.hold_s;
      if (holdS === 0) return refuse(503, noneReady(now), 'no_ready_replica');
      if (res.destroyed) return;
      const stop = () => {
        unhold();
        clearTimeout(timer);
        res.off('close', stop);
      };
      const unhold = services.hold(table.run, (next) => {
        stop();
        if (next) forward(next);
        else refuse(503, `service "${table.run}" was taken off this gateway while the request waited for a ready replica`, 'no_ready_replica');
      });
      const timer = setTimeout(() => {
        stop();
        refuse(503, `${noneReady(services.get(table.run) ?? now)}; waited ${holdS} s for one`, 'no_ready_replica');
      }, holdS * 1000).unref();
      // A client that goes away stops waiting, and is no longer counted as held.
      res.once('close', stop);
    };
    const limited = (rate: RateVerdict) => {
      if (rate.allowed) return false;
      refuse(429, `rate limit of service "${table.run}" reached; retry after ${rate.retryAfterSeconds} s`, 'rate_limited', { 'retry-after': String(rate.retryAfterSeconds) });
      return true;
    };
    if (limiter.active) {
      const limitPath = route.servicePath.replace(/[?#].*$/s, '');
      const limit = limiter.limitFor(limitPath);
      if (limit !== undefined && options.sharedRates !== undefined) {
        options.sharedRates(table.run, limitPath, rateKey(req, limit.key)).then(
          (rate) => {
            if (limited(rate) || res.destroyed) return;
            // The table may have changed while the primary answered: a drained replica gets no new request.
            const now = services.get(route.run);
            if (now) forward(now);
            else answer(res, 404, `no service "${route.run}" on this gateway`);
          },
          () => refuse(503, `the rate limits of service "${table.run}" cannot be checked: the gateway is stopping`, 'rate_limits_unavailable'),
        );
        return;
      }
      if (limit !== undefined && limited(limiter.check(limitPath, (l) => rateKey(req, l.key), Date.now()))) return;
    }
    forward(served);
  };
}
