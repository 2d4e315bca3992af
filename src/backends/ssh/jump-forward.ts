import type { Duplex } from 'node:stream';
import { connectSsh } from './connect';
import { HostKeyTrust } from './host-key-trust';
import { describeTarget, type SshTarget } from './target';

/** Keys come only from the targets' fingerprints (what the fleet verified), as the SSH backend's. */
const trust = new HostKeyTrust({ knownHostsFiles: [], allowPinning: false });

/**
 * A stream to `hostname:port` on the private network of `host`'s proxy_jump, forwarded by the jump host
 * (`direct-tcpip`) over the pooled connection the SSH backend already keeps to it for that host, with
 * the fleet's key; for a host with no proxy_jump, forwarded by the host itself (its own private
 * address). Throws, naming the host, when it cannot be reached or will not forward.
 */
export async function forwardThroughJump(host: SshTarget, hostname: string, port: number, timeoutMs: number): Promise<Duplex> {
  // A host with no proxy_jump forwards to its own private address itself.
  const through = host.proxy_jump ?? host;
  try {
    const session = await connectSsh(through, trust);
    return await session.forwardOut(hostname, port, timeoutMs);
  } catch (err) {
    const where = describeTarget(through);
    // The SSH errors name the host first already.
    const why = (err instanceof Error ? err.message : String(err)).replace(`${where}: `, '');
    throw new Error(`through ${host.proxy_jump ? 'jump host' : 'host'} ${where}: ${why}`, { cause: err });
  }
}
