import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { z } from 'zod';

/**
 * Temporal's remote codec endpoint over a PayloadCodec, for the Web UI and `temporal --codec-endpoint`:
 * `POST /encode` and `POST /decode` (also under `/{namespace}/`), JSON bodies
 * `{"payloads":[{"metadata":{"encoding":"<base64>"},"data":"<base64>"}]}` in and out.
 * The namespace comes from the `X-Namespace` header (or the path).
 *
 * Who may call. Every encode and decode carries a credential: the token as `Authorization: Bearer
 * <token>` (the temporal CLI, scripts), or the session cookie a browser got by signing in once at
 * `/login` with that token (the Web UI, whose codec settings include credentials:
 * TEMPORAL_CODEC_INCLUDE_CREDENTIALS). An `Origin` alone admits no one, since any local process can
 * forge one; the one exception is `trustOrigin`, for the embedded dev server's Web UI, which cannot
 * be told to send credentials. Besides: the `Host` must be a loopback name, the bound address or
 * one configured (DNS rebinding); a request with an `Origin` must come from a configured origin
 * (the Web UI's), and only those get a preflight's answer; bodies must be `application/json`, so a
 * browser has to preflight. The cookie is HttpOnly and SameSite=Strict: a page of another site
 * cannot make the browser send it, and no script reads it.
 */

/** Where `troupe codec-server` listens by default, and so where the embedded dev server's Web UI looks for it. */
export const DEFAULT_CODEC_PORT = 8234;

export interface CodecServerOptions {
  codec: PayloadCodec;
  /** Browser origins allowed to call (the Web UI's), exactly as the browser sends them. */
  corsOrigins: readonly string[];
  /** Namespaces served; empty: every namespace. */
  namespaces: readonly string[];
  host: string;
  port: number;
  /** Host names (no port) a request may name besides the loopback names and `host`. */
  allowedHosts?: readonly string[];
  /** The credential: sent as `Authorization: Bearer <token>`, or given once at `/login` for the session cookie. */
  token: string;
  /**
   * Admit the `corsOrigins` without a credential. Only for the embedded dev server's Web UI, which
   * sends none: any local process that forges the `Origin` header is then admitted too.
   */
  trustOrigin?: boolean;
}

/** The browser's session cookie, set by `POST /login`. */
export const SESSION_COOKIE = 'troupe_codec_session';

/** The session cookie's value: derived from the token (it opens this codec server, not the token's other uses). */
export function sessionValue(token: string): string {
  return createHmac('sha256', token).update('troupe codec session v1').digest('base64url');
}

const LOOPBACK_HOSTS = ['localhost', '127.0.0.1', '::1'];

const MAX_BODY_BYTES = 64 * 1024 * 1024;

const PayloadJsonSchema = z.object({
  metadata: z.record(z.string(), z.string()).optional(),
  data: z.string().optional(),
});
const BodySchema = z.object({ payloads: z.array(PayloadJsonSchema) });
type PayloadJson = z.infer<typeof PayloadJsonSchema>;

const base64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString('base64');

export function payloadFromJson(json: PayloadJson): Payload {
  return {
    metadata: Object.fromEntries(Object.entries(json.metadata ?? {}).map(([k, v]) => [k, new Uint8Array(Buffer.from(v, 'base64'))])),
    data: new Uint8Array(Buffer.from(json.data ?? '', 'base64')),
  };
}

export function payloadToJson(payload: Payload): PayloadJson {
  return {
    metadata: Object.fromEntries(Object.entries(payload.metadata ?? {}).map(([k, v]) => [k, base64(v)])),
    data: base64(payload.data ?? new Uint8Array()),
  };
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buf = chunk as Buffer;
    size += buf.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, `request body over ${MAX_BODY_BYTES} bytes`);
    chunks.push(buf);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function route(path: string): { operation: 'encode' | 'decode'; pathNamespace: string | null } | null {
  const match = /^(?:\/([^/]+))?\/(encode|decode)\/?$/.exec(path);
  if (!match) return null;
  return { operation: match[2] as 'encode' | 'decode', pathNamespace: match[1] ? decodeURIComponent(match[1]) : null };
}

function setCors(req: IncomingMessage, res: ServerResponse, origins: readonly string[]): void {
  const origin = req.headers.origin;
  if (origin === undefined || !origins.includes(origin)) return;
  res.setHeader('Access-Control-Allow-Origin', origin);
  res.setHeader('Vary', 'Origin');
  res.setHeader('Access-Control-Allow-Methods', 'POST, OPTIONS');
  res.setHeader('Access-Control-Allow-Headers', 'Content-Type, X-Namespace, Authorization');
  res.setHeader('Access-Control-Allow-Credentials', 'true');
  res.setHeader('Access-Control-Max-Age', '600');
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** The host name of a Host header, lowercased, without port or IPv6 brackets; null when malformed. */
export function hostNameOf(header: string | undefined): string | null {
  if (!header) return null;
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+))(?::\d{1,5})?$/.exec(header.trim());
  if (!match) return null;
  return (match[1] ?? match[2] ?? '').toLowerCase();
}

/** Constant-time equality of a given secret and the expected one. */
function secretMatches(given: string | undefined, expected: string): boolean {
  if (!given) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

function cookieOf(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return value.join('=');
  }
  return undefined;
}

function hasCredential(opts: CodecServerOptions, req: IncomingMessage): boolean {
  const bearer = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
  return secretMatches(bearer, opts.token) || secretMatches(cookieOf(req, SESSION_COOKIE), sessionValue(opts.token));
}

/**
 * Refuses a caller the server must not answer: foreign Host, foreign Origin, a preflight from any
 * origin but the configured ones, an encode or decode without a credential. `ownOrigin`: the sign-in
 * page posts from the codec server's own origin.
 */
function admit(opts: CodecServerOptions, req: IncomingMessage, ownOrigin = false): void {
  const host = hostNameOf(req.headers.host);
  const hosts = [...LOOPBACK_HOSTS, opts.host.toLowerCase(), ...(opts.allowedHosts ?? []).map((h) => h.toLowerCase())];
  if (host === null || !hosts.includes(host)) {
    throw new HttpError(421, `host ${JSON.stringify(req.headers.host ?? '')} is not served here (allowed: ${hosts.join(', ')}; add it with --allowed-host)`);
  }
  const origin = req.headers.origin;
  const configured = origin !== undefined && opts.corsOrigins.includes(origin);
  if (origin !== undefined && !configured && !(ownOrigin && origin === `http://${req.headers.host ?? ''}`)) {
    throw new HttpError(403, `origin ${JSON.stringify(origin)} is not allowed (allowed: ${opts.corsOrigins.join(', ')}; add it with --cors-origin)`);
  }
  if (req.method === 'OPTIONS') {
    if (!configured) throw new HttpError(403, `a preflight is answered for the configured origins only (${opts.corsOrigins.join(', ')})`);
    return;
  }
  if (ownOrigin || (opts.trustOrigin === true && configured) || hasCredential(opts, req)) return;
  throw new HttpError(
    401,
    'a credential is required: Authorization: Bearer <token> (the codec token file, TROUPE_CODEC_TOKEN_FILE), or a browser signed in at /login with that token',
  );
}

const LOGIN_FORM = `<!doctype html><meta charset="utf-8"><title>Troupe codec server</title>
<form method="post" action="/login"><p>Sign this browser in to the codec server, so the Temporal Web UI shows payloads decoded.</p>
<label>Codec token (the codec token file) <input name="token" type="password" autocomplete="off" required></label> <button>Sign in</button></form>`;

/**
 * `GET /login`: the form; `POST /login` with the token: the session cookie (HttpOnly, SameSite=Strict,
 * 30 days), so the Web UI's requests carry a credential a local process does not have.
 */
async function login(opts: CodecServerOptions, req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (req.method === 'GET') {
    // Never inside another page's frame: a page could overlay the form and catch the token typed in.
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store', 'X-Frame-Options': 'DENY', 'Content-Security-Policy': "frame-ancestors 'none'" });
    res.end(LOGIN_FORM);
    return;
  }
  if (req.method !== 'POST') throw new HttpError(405, `${req.method ?? '?'} not allowed: use GET or POST /login`);
  const token = new URLSearchParams(await readBody(req)).get('token')?.trim();
  if (!secretMatches(token, opts.token)) throw new HttpError(401, 'not the codec token: nothing was set');
  res.writeHead(200, {
    'Content-Type': 'text/html; charset=utf-8',
    'Cache-Control': 'no-store',
    'Set-Cookie': `${SESSION_COOKIE}=${sessionValue(opts.token)}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${30 * 24 * 3600}`,
  });
  res.end('<!doctype html><meta charset="utf-8"><title>Troupe codec server</title><p>Signed in: the Web UI decodes through this codec server from this browser.</p>');
}

async function handle(opts: CodecServerOptions, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://codec').pathname;
  if (path === '/login') {
    admit(opts, req, true);
    await login(opts, req, res);
    return;
  }
  // First, so that the Web UI can read a refusal's reason too (a 401 tells where to sign in).
  setCors(req, res, opts.corsOrigins);
  admit(opts, req);
  const target = route(path);
  if (!target) throw new HttpError(404, 'not found: the codec server answers POST /encode and POST /decode');
  if (req.method === 'OPTIONS') {
    res.writeHead(204);
    res.end();
    return;
  }
  if (req.method !== 'POST') throw new HttpError(405, `${req.method ?? '?'} not allowed: use POST`);
  const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
  if (type !== 'application/json') throw new HttpError(415, `the body must be application/json (got ${JSON.stringify(type ?? '')})`);
  const header = req.headers['x-namespace'];
  const namespace = (Array.isArray(header) ? header[0] : header) ?? target.pathNamespace ?? 'default';
  if (opts.namespaces.length > 0 && !opts.namespaces.includes(namespace)) {
    throw new HttpError(403, `namespace "${namespace}" is not served by this codec server`);
  }
  let parsed: z.infer<typeof BodySchema>;
  try {
    parsed = BodySchema.parse(JSON.parse(await readBody(req)));
  } catch (err) {
    if (err instanceof HttpError) throw err;
    throw new HttpError(400, 'the body must be JSON {"payloads":[{"metadata":{...base64},"data":"base64"}]}');
  }
  const payloads = parsed.payloads.map(payloadFromJson);
  let out: Payload[];
  try {
    out = target.operation === 'encode' ? await opts.codec.encode(payloads) : await opts.codec.decode(payloads);
  } catch (err) {
    throw new HttpError(400, err instanceof Error ? err.message : String(err));
  }
  send(res, 200, { payloads: out.map(payloadToJson) });
}

/** Starts listening; resolves once bound (the port is the given one, or the one chosen for 0). */
export async function startCodecServer(opts: CodecServerOptions): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    handle(opts, req, res).catch((err: unknown) => {
      const status = err instanceof HttpError ? err.status : 500;
      send(res, status, { message: err instanceof Error ? err.message : String(err) });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return { server, url: `http://${host}:${port}` };
}
