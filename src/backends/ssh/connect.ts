import { connect as tcpConnect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import ssh2, { type ConnectConfig } from 'ssh2';
import {
  SshAuthenticationError,
  SshConnectionLostError,
  SshConnectionRefusedError,
  SshError,
  SshHostUnreachableError,
  SshTimeoutError,
} from './errors';
import type { HostKeyTrust, VerifiedHostKey } from './host-key-trust';
import { loadIdentityFile } from './identity-file';
import { SshSession } from './session';
import { describeTarget, type SshTarget } from './target';
import { resolveTimeouts, type SshTimeouts } from './timeouts';

export interface ConnectOptions {
  /** Overrides of DEFAULT_SSH_TIMEOUTS; the first caller's values shape a pooled connection. */
  timeouts?: Partial<SshTimeouts>;
  /**
   * False: a new connection (its jump connection too) outside the pool, which the caller closes;
   * a probe uses one to see the key the host presents now, not the one of a connection opened earlier.
   */
  pooled?: boolean;
}

// ssh2's default host key algorithms; ours differ only in putting the known key types first.
const HOST_KEY_ALGORITHMS = [
  'ssh-ed25519',
  'ecdsa-sha2-nistp256',
  'ecdsa-sha2-nistp384',
  'ecdsa-sha2-nistp521',
  'rsa-sha2-512',
  'rsa-sha2-256',
  'ssh-rsa',
] as const;
type HostKeyAlgorithm = (typeof HOST_KEY_ALGORITHMS)[number];

const pool = new Map<string, Promise<SshSession>>();

function poolKey(target: SshTarget): string {
  const jump: string = target.proxy_jump ? poolKey(target.proxy_jump) : '';
  return JSON.stringify([target.user, target.hostname, target.port, target.identity_file, jump]);
}

/**
 * An authenticated session to the target, reusing the pooled connection to that host (one per
 * user, host, port, key and jump chain) when it is alive. The host key is checked by `trust` at
 * every handshake, and a reused connection's key is checked again against the caller's trust.
 */
export async function connectSsh(target: SshTarget, trust: HostKeyTrust, options: ConnectOptions = {}): Promise<SshSession> {
  if (options.pooled === false) return openSession(target, trust, resolveTimeouts(options.timeouts), options);
  const key = poolKey(target);
  const existing = pool.get(key);
  if (existing) {
    const session = await existing.catch(() => null);
    if (session && !session.closed) {
      trust.verify(await trust.expectationFor(target), Buffer.from(session.hostKey.publicKey, 'base64'));
      return session;
    }
    if (pool.get(key) === existing) pool.delete(key);
  }
  const opening = openSession(target, trust, resolveTimeouts(options.timeouts), options);
  pool.set(key, opening);
  opening.then(
    (session) => session.onLost(() => pool.get(key) === opening && pool.delete(key)),
    () => pool.get(key) === opening && pool.delete(key),
  );
  return opening;
}

/** Closes every pooled connection (worker shutdown, end of a test file). */
export async function closeAllSshSessions(): Promise<void> {
  const sessions = await Promise.all([...pool.values()].map((p) => p.catch(() => null)));
  pool.clear();
  for (const session of sessions) session?.close();
}

async function openSession(target: SshTarget, trust: HostKeyTrust, timeouts: SshTimeouts, options: ConnectOptions): Promise<SshSession> {
  const host = describeTarget(target);
  const privateKey = await loadIdentityFile(target.identity_file, host);
  const expectation = await trust.expectationFor(target);
  const jump = target.proxy_jump ? await connectSsh(target.proxy_jump, trust, options) : null;
  const sock = jump ? await jumpStream(jump, target, host, timeouts) : await tcpStream(target, host, timeouts);

  const client = new ssh2.Client();
  let verified: VerifiedHostKey | null = null;
  let refusal: SshError | null = null;
  const preferred = expectation.preferredAlgorithms.filter((a): a is HostKeyAlgorithm =>
    (HOST_KEY_ALGORITHMS as readonly string[]).includes(a),
  );
  const config: ConnectConfig = {
    sock: sock as ConnectConfig['sock'],
    username: target.user,
    privateKey,
    readyTimeout: timeouts.handshakeMs,
    keepaliveInterval: timeouts.keepaliveIntervalMs,
    keepaliveCountMax: timeouts.keepaliveCountMax,
    algorithms: { serverHostKey: [...new Set([...preferred, ...HOST_KEY_ALGORITHMS])] },
    hostVerifier: (keyBlob: Buffer) => {
      try {
        verified = trust.verify(expectation, keyBlob);
        return true;
      } catch (err) {
        refusal = err instanceof SshError ? err : new SshError(host, String(err));
        return false;
      }
    },
  };

  // Lasting listeners first, so an error between "ready" and the session's creation is never unhandled.
  let session: SshSession | null = null;
  let lateError: SshError | null = null;
  const lost = (err: SshError): void => {
    if (session) session.markLost(err);
    else lateError ??= err;
  };
  client.on('error', (err: Error & { level?: string }) => {
    const reason =
      err.message === 'Keepalive timeout'
        ? `no answer to ${timeouts.keepaliveCountMax} keepalives sent every ${timeouts.keepaliveIntervalMs} ms: the host is down, hung or cut off`
        : err.message;
    lost(new SshConnectionLostError(host, `${host}: connection lost (${reason})`, { cause: err }));
  });
  client.on('close', () => lost(new SshConnectionLostError(host, `${host}: connection closed by the remote side`)));

  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error & { level?: string; code?: string }): void => {
      client.removeListener('ready', onReady);
      client.removeListener('close', onClose);
      sock.destroy();
      reject(refusal ?? handshakeError(host, target, err, timeouts));
    };
    const onClose = (): void => onError(Object.assign(new Error('connection closed during the handshake'), { level: 'client-socket' }));
    const onReady = (): void => {
      client.removeListener('error', onError);
      client.removeListener('close', onClose);
      resolve();
    };
    client.once('ready', onReady);
    client.once('error', onError);
    client.once('close', onClose);
    client.connect(config);
  });
  if (!verified) {
    client.end();
    throw new SshError(host, `${host}: handshake completed without a host key check`);
  }
  if (lateError) {
    client.end();
    throw lateError;
  }

  const opened = new SshSession(target, host, verified, jump, client, timeouts);
  session = opened;
  // A tunnel dies with its jump host.
  jump?.onLost((err) => opened.markLost(new SshConnectionLostError(host, `${host}: jump host lost: ${err.message}`, { cause: err })));
  return opened;
}

function tcpStream(target: SshTarget, host: string, timeouts: SshTimeouts): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = tcpConnect({ host: target.hostname, port: target.port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new SshTimeoutError(host, 'connect', timeouts.connectMs, `no answer from ${target.hostname}:${target.port}`));
    }, timeouts.connectMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      reject(socketError(host, err));
    });
  });
}

async function jumpStream(jump: SshSession, target: SshTarget, host: string, timeouts: SshTimeouts): Promise<Duplex> {
  try {
    return await jump.forwardOut(target.hostname, target.port, timeouts.connectMs);
  } catch (err) {
    if (err instanceof SshTimeoutError || err instanceof SshConnectionLostError) throw err;
    const message = (err as Error).message;
    const detail = `jump host ${jump.host} cannot reach ${target.hostname}:${target.port}: ${message.replace(/^.*?: /, '')}`;
    if (/refused/i.test(message)) throw new SshConnectionRefusedError(host, `${host}: ${detail}`, { cause: err });
    throw new SshHostUnreachableError(host, `${host}: ${detail}`, { cause: err });
  }
}

function socketError(host: string, err: NodeJS.ErrnoException): SshError {
  switch (err.code) {
    case 'ECONNREFUSED':
      return new SshConnectionRefusedError(host, `${host}: connection refused (is sshd running and listening on that port?)`, { cause: err });
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'EHOSTDOWN':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new SshHostUnreachableError(host, `${host}: host unreachable (${err.code}: ${err.message})`, { cause: err });
    default:
      return new SshConnectionLostError(host, `${host}: connection failed (${err.code ?? ''} ${err.message})`, { cause: err });
  }
}

function handshakeError(host: string, target: SshTarget, err: Error & { level?: string; code?: string }, timeouts: SshTimeouts): SshError {
  if (err.level === 'client-authentication') {
    return new SshAuthenticationError(
      host,
      `${host}: authentication failed: the server refused the key ${target.identity_file} for user ${target.user}`,
      { cause: err },
    );
  }
  if (err.level === 'client-timeout') {
    return new SshTimeoutError(host, 'handshake', timeouts.handshakeMs, 'no SSH banner, key exchange or authentication answer in time');
  }
  if (err.level === 'client-socket' && err.code) return socketError(host, err);
  if (err.level === 'client-socket') {
    return new SshConnectionLostError(host, `${host}: connection dropped during the handshake (${err.message})`, { cause: err });
  }
  return new SshError(host, `${host}: SSH handshake failed (${err.message})`, { cause: err });
}
