import { writeFileSync } from 'node:fs';
import { connect as tcpConnect, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import { fingerprintOf } from '../../src/backends/ssh/host-key';

/**
 * A jump host in-process for unit tests of tunnels to replicas behind one (the gateway's, the worker's
 * replica metrics): an ssh2 server on 127.0.0.1 that forwards JUMP_HIDDEN:port to 127.0.0.1:port,
 * an address the test's machine itself could never reach.
 */

/** An address the test's machine has no route to (TEST-NET-1): only the jump host "reaches" it. */
export const JUMP_HIDDEN = '192.0.2.10';

/** Where a test registers what to close at its end. */
export type AtCleanup = (cleanup: () => Promise<void> | void) => void;

export interface Jump {
  port: number;
  fingerprint: string;
  /** SSH connections accepted, and direct-tcpip channels opened. */
  connections: number;
  channels: Array<{ host: string; port: number }>;
  /** Drops every SSH connection (a jump host restarted, a network blip). */
  drop(): void;
}

/** Listens on 127.0.0.1 at a port the system gives (answered), closed at the test's end after `drop` ends its connections. */
export async function listenUntilCleanup(
  server: { listen(port: number, host: string, cb: () => void): unknown; address(): unknown; close(cb: () => void): unknown },
  drop: () => void,
  atCleanup: AtCleanup,
): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  atCleanup(() => new Promise<void>((resolve) => (drop(), server.close(() => resolve()))));
  return (server.address() as AddressInfo).port;
}

/**
 * An ed25519 key pair and its public key as ssh2 parses it. About 1 key in 300 that ssh2 generates has a
 * 31-byte public key (a leading zero byte dropped), which its own parser refuses as malformed: such a
 * key is drawn again.
 */
function keyPair(): { private: string; public: ssh2.ParsedKey } {
  for (let tries = 0; ; tries++) {
    const pair = ssh2.utils.generateKeyPairSync('ed25519');
    const parsed = ssh2.utils.parseKey(pair.public);
    if (!(parsed instanceof Error)) return { private: pair.private, public: parsed };
    if (tries >= 10) throw parsed;
  }
}

/** A client key written mode 0600: its private key file and its public key as ssh2 parses it. */
export function clientKey(dir: string, name: string): { file: string; publicSsh: Buffer } {
  const pair = keyPair();
  const file = join(dir, name);
  writeFileSync(file, pair.private, { mode: 0o600 });
  return { file, publicSsh: pair.public.getPublicSSH() };
}

/**
 * A jump host that lets `allowed` in and forwards `JUMP_HIDDEN:port` to 127.0.0.1:port; with `forwards`
 * false, it refuses every forwarding as administratively prohibited (as sshd does for a key whose
 * permitopen does not name the address).
 */
export async function startJumpHost(allowed: Buffer, atCleanup: AtCleanup, forwards = true): Promise<Jump> {
  const host = keyPair();
  const clients = new Set<ssh2.Connection>();
  const jump: Jump = { port: 0, fingerprint: fingerprintOf(host.public.getPublicSSH()), connections: 0, channels: [], drop: () => clients.forEach((c) => c.end()) };
  const server = new ssh2.Server({ hostKeys: [host.private] }, (client) => {
    clients.add(client);
    client.on('close', () => clients.delete(client));
    client.on('error', () => undefined);
    client.on('authentication', (ctx) => {
      if (ctx.method !== 'publickey' || !ctx.key.data.equals(allowed)) return ctx.reject(['publickey']);
      const key = ssh2.utils.parseKey(ctx.key.data);
      if (key instanceof Error) return ctx.reject();
      if (ctx.signature && ctx.blob && key.verify(ctx.blob, ctx.signature, ctx.hashAlgo) !== true) return ctx.reject();
      ctx.accept();
    });
    client.on('ready', () => {
      jump.connections += 1;
      if (!forwards) return;
      client.on('tcpip', (accept, reject, info) => {
        jump.channels.push({ host: info.destIP, port: info.destPort });
        if (info.destIP !== JUMP_HIDDEN) return reject();
        const socket = tcpConnect(info.destPort, '127.0.0.1');
        socket.once('error', () => reject());
        socket.once('connect', () => {
          const channel = accept();
          socket.pipe(channel).pipe(socket);
          channel.on('error', () => socket.destroy());
          socket.on('error', () => channel.destroy());
        });
      });
    });
  });
  jump.port = await listenUntilCleanup(server, () => jump.drop(), atCleanup);
  return jump;
}
