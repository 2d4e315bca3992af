import type { IncomingMessage, ServerResponse } from 'node:http';
import { mergeFigures, windowParam, type FiguresPart } from './figures';
import { bearerToken, tokenHash, tokenMatchesHashes } from './token-auth';
import type { GatewayMetrics } from './gateway-metrics';
import type { GatewayServices, InflightRow } from './gateway-services';
import { checkRevisionHere, RevisionCheckSchema } from './revision-check';
import { describeTableIssues, ServiceTableSchema, type GatewayInfo, type ServiceTable } from './routing-table';
import type { GatewayStateWriter } from './state-file';

/**
 * The admin API, on its own address: what a run pushes (a service's whole table, a lower generation
 * than the one held refused with 409), what a rollout's drain and an operator read, and a rollout's gate A
 * sent from here (revision-check.ts). Every call needs `Authorization: Bearer <admin token>`.
 */

/** A table is small; a bigger body is a mistake or an attack. */
const MAX_TABLE_BYTES = 1024 * 1024;

function send(res: ServerResponse, status: number, body: unknown, contentType = 'application/json'): void {
  res.writeHead(status, { 'content-type': contentType });
  res.end(typeof body === 'string' ? body : `${JSON.stringify(body)}\n`);
}

async function readBody(req: IncomingMessage): Promise<string | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_TABLE_BYTES) return null;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The request's body as JSON; undefined once the 413 or 400 saying why is sent (`what`: the body's name, `tail`: said after a 400). */
async function jsonBody(req: IncomingMessage, res: ServerResponse, what: string, tail: string): Promise<{ data: unknown } | undefined> {
  const text = await readBody(req);
  if (text === null) {
    send(res, 413, { error: `a ${what} is at most ${MAX_TABLE_BYTES} bytes` });
    return undefined;
  }
  try {
    return { data: JSON.parse(text) as unknown };
  } catch (err) {
    send(res, 400, { error: `the ${what} is not JSON: ${err instanceof Error ? err.message : String(err)}${tail}` });
    return undefined;
  }
}

/** A table as `GET /services` shows it: how many tokens, never their hashes. */
function shown(table: ServiceTable): Omit<ServiceTable, 'auth'> & { auth: { tokens: number } | null } {
  return { ...table, auth: table.auth ? { tokens: table.auth.token_sha256.length } : null };
}

/**
 * A clustered gateway's data-plane workers, as its primary's admin API reaches them: a table changed is
 * answered once every worker serves it, and in-flight counts and metrics are theirs, added up.
 */
export interface WorkerLink {
  put(table: ServiceTable): Promise<void>;
  delete(run: string): Promise<void>;
  inflightRows(run: string): Promise<InflightRow[]>;
  /** Each worker's figures of the service, to be added up. */
  figures(run: string, windowS: number): Promise<FiguresPart[]>;
  metrics(): Promise<string>;
}

export interface AdminPlaneOptions {
  adminToken: string;
  /** Read per call: the data plane's address is known once it listens. */
  info: () => GatewayInfo;
  services: GatewayServices;
  metrics: GatewayMetrics;
  /** null: tables live in memory only. */
  state: GatewayStateWriter | null;
  /** Set on a clustered gateway's primary, whose `services` only hold the tables. */
  workers?: WorkerLink | undefined;
}

export function adminPlaneHandler(options: AdminPlaneOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const adminHash = [tokenHash(options.adminToken)];
  const { services, metrics, state, workers } = options;
  const persist = async () => {
    if (state) await state.write(services.tables());
  };
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const token = bearerToken(req.headers.authorization);
    if (token === undefined) return send(res, 401, { error: 'the admin API wants Authorization: Bearer <admin token>' });
    if (!tokenMatchesHashes(token, adminHash)) return send(res, 403, { error: 'wrong admin token' });
    const url = new URL(req.url ?? '/', 'http://admin');
    const path = url.pathname;
    if (path === '/metrics' && req.method === 'GET') return send(res, 200, workers ? await workers.metrics() : await metrics.registry.metrics(), metrics.registry.contentType);
    if (path === '/info' && req.method === 'GET') return send(res, 200, options.info());
    if (path === '/services' && req.method === 'GET') return send(res, 200, { services: services.tables().map(shown) });
    const inflight = /^\/services\/([^/]+)\/inflight$/.exec(path);
    if (inflight && req.method === 'GET') {
      const run = inflight[1] as string;
      if (!services.get(run)) return send(res, 404, { error: `no service "${run}" on this gateway` });
      return send(res, 200, { run, replicas: workers ? await workers.inflightRows(run) : services.inflightRows(run) });
    }
    const figures = /^\/services\/([^/]+)\/figures$/.exec(path);
    if (figures && req.method === 'GET') {
      const run = figures[1] as string;
      if (!services.get(run)) return send(res, 404, { error: `no service "${run}" on this gateway` });
      const windowS = windowParam(url.searchParams.get('window'));
      if (typeof windowS === 'string') return send(res, 400, { error: windowS });
      const parts = workers ? await workers.figures(run, windowS) : [services.figuresPart(run, windowS, Date.now())];
      return send(res, 200, mergeFigures(run, windowS, parts));
    }
    const check = /^\/services\/([^/]+)\/check$/.exec(path);
    if (check && req.method === 'POST') {
      const run = check[1] as string;
      const body = await jsonBody(req, res, 'check', '');
      if (!body) return;
      const parsed = RevisionCheckSchema.safeParse(body.data);
      if (!parsed.success) return send(res, 400, { error: `bad check: ${describeTableIssues(parsed.error, '(body)')}` });
      // This process's services: a clustered gateway's primary reaches replicas for its probes, and so for this.
      const outcome = await checkRevisionHere(services, run, parsed.data);
      return outcome.status === 200 ? send(res, 200, outcome.answer) : send(res, outcome.status, { error: outcome.error });
    }
    const one = /^\/services\/([^/]+)$/.exec(path);
    if (one && req.method === 'PUT') {
      const run = one[1] as string;
      const body = await jsonBody(req, res, 'table', "; the service's table is unchanged");
      if (!body) return;
      const parsed = ServiceTableSchema.safeParse(body.data);
      if (!parsed.success) return send(res, 400, { error: `bad table: ${describeTableIssues(parsed.error)}; the service's table is unchanged` });
      if (parsed.data.run !== run) return send(res, 400, { error: `the table is for run "${parsed.data.run}", the path names "${run}"; the service's table is unchanged` });
      // Checked and put with no await between: two PUTs at once cannot both pass the check.
      const held = services.get(run)?.table.generation;
      if (held !== undefined && parsed.data.generation < held) return send(res, 409, { error: `stale: generation ${parsed.data.generation} < held ${held}` });
      services.put(parsed.data);
      await workers?.put(parsed.data);
      await persist();
      return send(res, 200, { run, generation: parsed.data.generation, current_revision: parsed.data.current_revision });
    }
    if (one && req.method === 'DELETE') {
      const run = one[1] as string;
      if (!services.delete(run)) return send(res, 404, { error: `no service "${run}" on this gateway` });
      await workers?.delete(run);
      await persist();
      return send(res, 200, { run, deleted: true });
    }
    return send(res, 404, { error: 'admin API: PUT|DELETE /services/<run>, GET /services, GET /services/<run>/inflight, GET /services/<run>/figures?window=<s>, POST /services/<run>/check, GET /info, GET /metrics' });
  };
  return (req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) send(res, 500, { error: err instanceof Error ? err.message : String(err) });
      else res.destroy();
    });
  };
}
