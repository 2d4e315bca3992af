import type { Socket } from 'node:net';
import type { buildConnector } from 'undici';
import { connectSsh } from '../backends/ssh/connect';
import { SshConnectionLostError, SshConnectionRefusedError, SshError, SshHostUnreachableError, SshTimeoutError } from '../backends/ssh/errors';
import { HostKeyTrust } from '../backends/ssh/host-key-trust';
import { NO_ROUTE_CODES } from '../backends/ssh/jump-host';
import type { SshSession } from '../backends/ssh/session';
import { describeTarget, type SshTarget } from '../backends/ssh/target';
import { resolveTimeouts, type SshTimeouts } from '../backends/ssh/timeouts';
import type { ReplicaVia } from './routing-table';

/**
 * The gateway's SSH tunnels to replicas it has no route to (a row's `via`: the jump host of the replica's
 * host). The run says only where the jump host is; the key is the gateway operator's (`--ssh-identity`),
 * and the jump host's key is checked against `--ssh-known-hosts`, or else against the fingerprint its
 * fleet verified (in the row). One SSH connection per jump host, opened again on the next connection
 * after it drops (keepalives tell a dead one). Each connection undici opens to such a replica is a
 * channel of it (undici's `connect` option): the data plane's forwarding, probes and figures are the same
 * as for any replica. ssh2, as the SSH backend: its verified connections (src/backends/ssh) are reused.
 */

export interface TunnelOptions {
  /** A private key the jump hosts authorize (ideally restricted to `permitopen` the replicas); none: 502. */
  identityFile?: string | undefined;
  /** known_hosts with the jump hosts' keys; none: the fingerprints the fleets verified, carried in the rows. */
  knownHostsFile?: string | undefined;
  timeouts?: Partial<SshTimeouts> | undefined;
}

/** A row whose tunnel cannot be opened by this gateway as it is configured: what to configure. */
export class TunnelNotConfiguredError extends Error {
  override name = 'TunnelNotConfiguredError';
}

/** The key a replica's connection pool is kept by: its origin, and the jump host its connections go through. */
export function poolKeyOf(origin: string, via: ReplicaVia | undefined): string {
  return via ? JSON.stringify([origin, via.user, via.host, via.port, via.host_key_fingerprints ?? []]) : origin;
}

/** The jump host as an SSH target with the gateway's key: pure; throws what to configure when it cannot be. */
export function jumpTargetOf(via: ReplicaVia, options: TunnelOptions): SshTarget {
  const where = describeTarget({ hostname: via.host, port: via.port, user: via.user, identity_file: '' });
  if (options.identityFile === undefined) {
    throw new TunnelNotConfiguredError(
      via.direct_first
        ? `this gateway has no route to the replica's private address, which its host ${where} reaches, and no SSH key for that host: start the gateway with --ssh-identity FILE, a key ${via.user} on that host authorizes (or run it where the hosts' internal_ip addresses are reachable)`
        : `the replica is reached through jump host ${where} (its fleet's proxy_jump), and this gateway has no SSH key for it: start the gateway with --ssh-identity FILE, a key ${via.user} on that host authorizes`,
    );
  }
  const fingerprints = options.knownHostsFile === undefined ? (via.host_key_fingerprints ?? []) : [];
  if (options.knownHostsFile === undefined && fingerprints.length === 0) {
    throw new TunnelNotConfiguredError(`${hostWord(via)} ${where} has no host key its fleet verified: start the gateway with --ssh-known-hosts FILE listing its key`);
  }
  return { hostname: via.host, port: via.port, user: via.user, identity_file: options.identityFile, ...(fingerprints.length > 0 ? { host_key_fingerprints: fingerprints } : {}) };
}

/** What the SSH host of a row's `via` is to the replica, for messages. */
function hostWord(via: ReplicaVia): string {
  return via.direct_first ? 'host' : 'jump host';
}

function sessionKey(target: SshTarget): string {
  return JSON.stringify([target.user, target.hostname, target.port, target.host_key_fingerprints ?? []]);
}

/** An error undici reports for a connection: with a connect code, the data plane tries another replica. */
function connectError(message: string, code: string | undefined, cause: unknown): Error {
  return Object.assign(new Error(message, { cause }), code === undefined ? {} : { code });
}

/** ssh2's channel open failure reasons (RFC 4254 §5.1). */
const ADMINISTRATIVELY_PROHIBITED = 1;
const CONNECT_FAILED = 2;

function jumpError(err: unknown): Error {
  if (err instanceof SshTimeoutError) return connectError(err.message, 'UND_ERR_CONNECT_TIMEOUT', err);
  if (err instanceof SshConnectionRefusedError) return connectError(err.message, 'ECONNREFUSED', err);
  if (err instanceof SshHostUnreachableError || err instanceof SshConnectionLostError) return connectError(err.message, 'EHOSTUNREACH', err);
  // A key refused, a host key that is not the known one, an unreadable key file: the operator's to fix.
  return connectError(err instanceof Error ? err.message : String(err), undefined, err);
}

function forwardError(jump: string, hostname: string, port: number, err: unknown, word = 'jump host'): Error {
  if (err instanceof SshTimeoutError || err instanceof SshConnectionLostError) return jumpError(err);
  // ssh2's channel open failure, as is or as the session's cause.
  const failure = (err instanceof SshError && err.cause instanceof Error ? err.cause : err) as Error & { reason?: unknown };
  const said = failure.message.replace(/^\(SSH\) Channel open failure: ?/, '') || 'no reason given';
  if (failure.reason === ADMINISTRATIVELY_PROHIBITED) {
    return connectError(`${word} ${jump} refuses to forward to ${hostname}:${port} (${said}): let the gateway's key forward there (permitopen="${hostname}:${port}", AllowTcpForwarding)`, undefined, err);
  }
  return connectError(`${word} ${jump} cannot reach ${hostname}:${port}: ${said}`, failure.reason === CONNECT_FAILED ? 'ECONNREFUSED' : 'EHOSTUNREACH', err);
}

export class ReplicaTunnels {
  private readonly trust: HostKeyTrust;
  private readonly timeouts: SshTimeouts;
  /** By jump host (poolKeyOf's via part): the connection, or the one being opened. */
  private readonly sessions = new Map<string, Promise<SshSession>>();
  private closed = false;

  constructor(private readonly options: TunnelOptions) {
    this.trust = new HostKeyTrust({ knownHostsFiles: options.knownHostsFile === undefined ? [] : [options.knownHostsFile], allowPinning: false });
    // A data plane keeps its jump connections while it lives (a request must not wait for a handshake), with keepalives.
    this.timeouts = resolveTimeouts({ idleCloseMs: 86_400_000, ...options.timeouts });
  }

  /**
   * undici's `connect` for a pool of replicas behind `via`: each connection a channel forwarded by the
   * jump host. For a `direct_first` row (the replica's own host, its private address): `direct` (a
   * plain connect with a short timeout) first; once it finds no route, this pool's connections all go
   * through the host (the first one waits out that timeout, once per pool).
   */
  connector(via: ReplicaVia, direct?: buildConnector.connector): buildConnector.connector {
    const tunnel: buildConnector.connector = (opts, callback) => {
      const port = Number(opts.port) || (opts.protocol === 'https:' ? 443 : 80);
      const hostname = opts.hostname.replace(/^\[(.*)\]$/, '$1');
      this.open(via, hostname, port).then(
        (channel) => callback(null, channel),
        (err: Error) => callback(err, null),
      );
    };
    if (!via.direct_first || !direct) return tunnel;
    let throughHost = false;
    return (opts, callback) => {
      if (throughHost) return tunnel(opts, callback);
      direct(opts, (err, socket) => {
        if (!err) return callback(null, socket);
        if (!NO_ROUTE_CODES.has((err as Error & { code?: string }).code ?? '')) return callback(err, null);
        throughHost = true;
        tunnel(opts, callback);
      });
    };
  }

  /** A stream to `hostname:port` as the jump host of `via` connects it. */
  async open(via: ReplicaVia, hostname: string, port: number): Promise<Socket> {
    const target = jumpTargetOf(via, this.options);
    const session = await this.session(target);
    try {
      // Not a net.Socket, but what undici uses of one (its optional calls guarded): a Duplex.
      return (await session.forwardOut(hostname, port, this.timeouts.connectMs)) as unknown as Socket;
    } catch (err) {
      throw forwardError(session.host, hostname, port, err, hostWord(via));
    }
  }

  private async session(target: SshTarget): Promise<SshSession> {
    if (this.closed) throw connectError('the gateway is stopping', undefined, undefined);
    const key = sessionKey(target);
    const existing = this.sessions.get(key);
    const alive = existing && (await existing.catch(() => null));
    if (alive && !alive.closed) return alive;
    if (existing && this.sessions.get(key) === existing) this.sessions.delete(key);
    // Outside the SSH backend's pool: this connection is the gateway's, with its key and trust, closed with it.
    const opening = connectSsh(target, this.trust, { timeouts: this.timeouts, pooled: false });
    this.sessions.set(key, opening);
    opening.then(
      (session) => session.onLost(() => this.sessions.get(key) === opening && this.sessions.delete(key)),
      () => this.sessions.get(key) === opening && this.sessions.delete(key),
    );
    try {
      return await opening;
    } catch (err) {
      throw jumpError(err);
    }
  }

  /** Closes the connections to jump hosts no row names any more (`vias`: every row's). */
  retain(vias: Iterable<ReplicaVia>): void {
    const wanted = new Set<string>();
    for (const via of vias) {
      try {
        wanted.add(sessionKey(jumpTargetOf(via, this.options)));
      } catch {
        // Not configured for it: there is no connection to keep.
      }
    }
    for (const [key, opening] of this.sessions) {
      if (wanted.has(key)) continue;
      this.sessions.delete(key);
      opening.then((session) => session.close(), () => undefined);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const sessions = await Promise.all([...this.sessions.values()].map((p) => p.catch(() => null)));
    this.sessions.clear();
    for (const session of sessions) session?.close();
  }
}
