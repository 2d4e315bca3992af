import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { checkBearer } from './token-auth';
import { chooseReplica, type Candidate } from './replica-choice';
import type { GatewayMetrics } from './gateway-metrics';
import type { GatewayServices } from './gateway-services';
import type { ServiceTable } from './routing-table';

/**
 * The data plane: every request of every service, `/services/<run>/…` or `Host: <run>.<domain>`.
 * Forwarding is undici's (`Pool.stream`): bodies stream both ways, a chunked or SSE answer goes out
 * chunk by chunk as it arrives. What is Troupe's own is the choice: which service, which replica, and
 * the service's auth and rate limits.
 */

export interface DataPlaneOptions {
  /** `<run>.<domain>` Host headers name a service; none: path routing only. */
  domain?: string | undefined;
}

/** Headers meant for one hop only (RFC 9110 §7.6.1), and the Host undici sets for the replica. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'http2-settings']);
const NOT_FORWARDED = new Set([...HOP_BY_HOP, 'host', 'expect']);

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
  const name = hostName(host);
  const suffix = domain !== undefined ? `.${domain.toLowerCase()}` : undefined;
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

function connectionTokens(headers: IncomingHttpHeaders): Set<string> {
  const value = headers.connection;
  return new Set((value ?? '').split(',').map((t) => t.trim().toLowerCase()).filter((t) => t.length > 0));
}

function requestHeaders(req: IncomingMessage, route: Route, strip: boolean): Record<string, string | string[]> {
  const named = connectionTokens(req.headers);
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || NOT_FORWARDED.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  const client = req.socket.remoteAddress ?? '';
  const prior = req.headers['x-forwarded-for'];
  out['x-forwarded-for'] = prior ? `${Array.isArray(prior) ? prior.join(', ') : prior}, ${client}` : client;
  out['x-forwarded-proto'] = 'http';
  if (req.headers.host !== undefined) out['x-forwarded-host'] = req.headers.host;
  if (strip && route.prefix) out['x-forwarded-prefix'] = route.prefix;
  return out;
}

function responseHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const named = new Set(String(headers.connection ?? '').split(',').map((t) => t.trim().toLowerCase()));
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
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

export function dataPlaneHandler(services: GatewayServices, metrics: GatewayMetrics, options: DataPlaneOptions): (req: IncomingMessage, res: ServerResponse) => void {
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
      const labels = { service: table.run, revision: String(table.current_revision), group: '', replica: '' };
      metrics.requests.inc({ ...labels, code: String(status) });
      metrics.errors.inc({ ...labels, reason: why });
      answer(res, status, reason, extra);
    };
    const verdict = checkBearer(req.headers.authorization, table.auth?.token_sha256 ?? null);
    if (verdict === 'missing') return refuse(401, `service "${table.run}" wants a token: Authorization: Bearer <token>`, 'unauthenticated', { 'www-authenticate': 'Bearer' });
    if (verdict === 'wrong') return refuse(403, `this token does not open service "${table.run}"`, 'forbidden');
    const limitPath = route.servicePath.replace(/[?#].*$/s, '');
    const rate = limiter.check(limitPath, (limit) => rateKey(req, limit.key), Date.now());
    if (!rate.allowed) return refuse(429, `rate limit of service "${table.run}" reached; retry after ${rate.retryAfterSeconds} s`, 'rate_limited', { 'retry-after': String(rate.retryAfterSeconds) });
    const entry = services.entryCandidates(table);
    const upstreamPath = table.strip_prefix ? route.servicePath : url;
    const headers = requestHeaders(req, route, table.strip_prefix);
    const streamsBody = hasBody(req);
    const abort = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    const startedAt = process.hrtime.bigint();
    const tried = new Set<string>();

    const attempt = (candidate: Candidate, last: boolean): void => {
      const labels = { service: table.run, revision: String(entry.revision), group: candidate.group, replica: candidate.replica.url };
      const leave = services.enter(table.run, entry.revision, candidate.group, candidate.replica.url);
      metrics.inflight.inc(labels);
      const done = () => {
        leave();
        metrics.inflight.set(labels, services.inflightOf(table.run, entry.revision, candidate.group, candidate.replica.url));
      };
      res.once('close', done);
      let bodyStarted = false;
      let responded = false;
      // A lazy stream over req, not req itself: undici pulls from it only once connected, so after a connect
      // error the request body is untouched and another replica can have it.
      async function* body(): AsyncGenerator<Buffer> {
        bodyStarted = true;
        for await (const chunk of req) yield chunk as Buffer;
      }
      services
        .pool(candidate.replica.url)
        .stream(
          { path: upstreamPath, method: (req.method ?? 'GET') as Dispatcher.HttpMethod, headers, body: streamsBody ? Readable.from(body(), { objectMode: false }) : null, signal: abort.signal },
          ({ statusCode, headers: upstreamHeaders }) => {
            responded = true;
            metrics.firstByte.observe(labels, Number(process.hrtime.bigint() - startedAt) / 1e9);
            const forwarded = responseHeaders(upstreamHeaders as Record<string, string | string[] | undefined>);
            res.writeHead(statusCode, forwarded);
            // An answer of unknown length (SSE, chunked) shows its headers at once, before its first
            // event; one of known length goes out with its body in one write.
            if (forwarded['content-length'] === undefined) res.flushHeaders();
            return res;
          },
        )
        .then(
          () => {
            done();
            metrics.requests.inc({ ...labels, code: String(res.statusCode) });
            metrics.latency.observe(labels, Number(process.hrtime.bigint() - startedAt) / 1e9);
          },
          (err: unknown) => {
            done();
            const code = errorCode(err);
            if (!responded && !bodyStarted && !last && code !== undefined && CONNECT_ERRORS.has(code) && !abort.signal.aborted) {
              metrics.errors.inc({ ...labels, reason: 'connect_retried' });
              tried.add(candidate.replica.url);
              const next = chooseReplica(entry.candidates, (c) => services.inflightOf(table.run, entry.revision, c.group, c.replica.url), services.nextTurn(), tried);
              if (next) {
                attempt(next, true);
                return;
              }
            }
            const reason = abort.signal.aborted ? 'client_gone' : responded ? 'upstream_broke' : code !== undefined && CONNECT_ERRORS.has(code) ? 'connect' : 'upstream';
            metrics.errors.inc({ ...labels, reason });
            if (abort.signal.aborted) return;
            metrics.requests.inc({ ...labels, code: responded ? String(res.statusCode) : '502' });
            if (responded) res.destroy();
            else answer(res, 502, `replica ${candidate.replica.url} of group "${candidate.group}" failed: ${code ?? (err instanceof Error ? err.message : String(err))}`);
          },
        );
    };

    const first = chooseReplica(entry.candidates, (c) => services.inflightOf(table.run, entry.revision, c.group, c.replica.url), services.nextTurn());
    if (!first) {
      return refuse(503, `no ready replica in group ${entry.groups.map((g) => `"${g}"`).join(', ') || '(none)'} of revision ${entry.revision} of service "${table.run}"`, 'no_ready_replica');
    }
    attempt(first, false);
  };
}
