import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { adminPlaneHandler, type WorkerLink } from './admin-plane';
import { dataPlaneHandler, type DataPlaneOptions } from './data-plane';
import { GatewayMetrics } from './gateway-metrics';
import { GatewayServices } from './gateway-services';
import { ReplicaProbes } from './replica-probes';
import type { TunnelOptions } from './replica-tunnels';
import { GatewayStateWriter, readGatewayState } from './state-file';

export interface GatewayOptions {
  listen: { host: string; port: number };
  admin: { host: string; port: number };
  adminToken: string;
  domain?: string | undefined;
  /** Where the tables are kept across restarts; none: in memory only. */
  stateFile?: string | undefined;
  /** What `GET /info` reports as the data plane (`http(s)://host[:port]`); default: the listen address, a wildcard host as 127.0.0.1. */
  publicUrl?: string | undefined;
  /** Default 3000 ms. */
  connectTimeoutMs?: number;
  /** The SSH key and known_hosts for replicas behind a jump host (replica-tunnels.ts). */
  tunnels?: TunnelOptions | undefined;
}

export interface RunningGateway {
  /** `http://host:port` of the data plane and of the admin API (the ports the system gave, for port 0). */
  url: string;
  adminUrl: string;
  /** Where users are told the data plane is (`GET /info`). */
  publicUrl: string;
  services: GatewayServices;
  metrics: GatewayMetrics;
  /** Stops accepting, lets requests in flight finish (up to `graceMs`, default 30 s), closes the pools. */
  close(graceMs?: number): Promise<void>;
}

async function listen(server: Server, host: string, port: number): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${shownHost}:${address.port}`;
}

export interface DataPlaneServer {
  /** `http://host:port`, the port the system gave for port 0. */
  url: string;
  /** Stops accepting and lets requests in flight finish, up to `graceMs`. */
  close(graceMs: number): Promise<void>;
}

/** The data plane's server on its address: a gateway's own, or each of a clustered gateway's workers'. */
export async function listenDataPlane(services: GatewayServices, metrics: GatewayMetrics, options: { host: string; port: number } & DataPlaneOptions): Promise<DataPlaneServer> {
  const data = createServer(dataPlaneHandler(services, metrics, options));
  // No timeout of the gateway's own on a request: a long LLM answer is the client's to give up on.
  data.requestTimeout = 0;
  const url = await listen(data, options.host, options.port);
  return {
    url,
    close: async (graceMs) => {
      data.closeIdleConnections();
      const grace = setTimeout(() => data.closeAllConnections(), graceMs);
      await new Promise<void>((resolve) => data.close(() => resolve()));
      clearTimeout(grace);
    },
  };
}

/** The probes after READY of every table `services` is given, from now on; `onFailing` hears their verdicts. */
export function probesOf(services: GatewayServices, metrics: GatewayMetrics, onFailing: (run: string, urls: ReadonlySet<string>) => void): ReplicaProbes {
  const probes = new ReplicaProbes({ metrics, onFailing, dispatcherOf: (origin, via) => services.pool(origin, via) });
  services.watch((run, table) => probes.sync(run, table));
  return probes;
}

/**
 * The data plane's address as a user can call it: `0.0.0.0` or `::` is where a server listens, not an
 * address to send a request to, so a gateway listening on every interface is reported on the loopback.
 */
export function defaultPublicUrl(listenUrl: string): string {
  const url = new URL(listenUrl);
  if (url.hostname === '0.0.0.0' || url.hostname === '[::]') url.hostname = '127.0.0.1';
  return url.origin;
}

/** One gateway process: the data plane and the admin API, each on its own address. Nothing shared with another gateway. */
export async function startGateway(options: GatewayOptions): Promise<RunningGateway> {
  if (options.adminToken.length < 16) throw new Error('the admin token must be at least 16 characters');
  const services = new GatewayServices({ connectTimeoutMs: options.connectTimeoutMs ?? 3000, tunnels: options.tunnels });
  const metrics = new GatewayMetrics((key) => services.inflightOf(key));
  const probes = probesOf(services, metrics, (run, urls) => services.setProbesFailing(run, urls));
  let data: DataPlaneServer;
  try {
    if (options.stateFile !== undefined) {
      for (const table of await readGatewayState(options.stateFile)) services.put(table);
    }
    data = await listenDataPlane(services, metrics, { ...options.listen, domain: options.domain });
  } catch (err) {
    probes.close();
    throw err;
  }
  const state = options.stateFile !== undefined ? new GatewayStateWriter(options.stateFile) : null;
  return withAdminPlane(options, { url: data.url, services, metrics, state }, async (graceMs) => {
    probes.close();
    await data.close(graceMs);
    await services.close();
  });
}

/**
 * The admin API beside a data plane — this process's own, or a clustered gateway's workers (`workers`) —
 * and the running gateway the two make. `stopData` stops the data plane, letting requests finish.
 */
export async function withAdminPlane(
  options: GatewayOptions,
  parts: { url: string; services: GatewayServices; metrics: GatewayMetrics; state: GatewayStateWriter | null; workers?: WorkerLink },
  stopData: (graceMs: number) => Promise<void>,
): Promise<RunningGateway> {
  const { url, services, metrics, state, workers } = parts;
  const publicUrl = options.publicUrl ?? defaultPublicUrl(url);
  const info = () => ({ data_plane_url: publicUrl, domain: options.domain ?? null });
  const admin = createServer(adminPlaneHandler({ adminToken: options.adminToken, info, services, metrics, state, workers }));
  let adminUrl: string;
  try {
    adminUrl = await listen(admin, options.admin.host, options.admin.port);
  } catch (err) {
    await stopData(0);
    throw err;
  }
  return {
    url,
    adminUrl,
    publicUrl,
    services,
    metrics,
    close: async (graceMs = 30_000) => {
      admin.closeAllConnections();
      await Promise.all([stopData(graceMs), new Promise<void>((resolve) => admin.close(() => resolve()))]);
    },
  };
}
