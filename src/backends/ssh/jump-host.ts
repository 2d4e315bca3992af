import type { SshTarget } from './target';

/** A host's proxy_jump as the gateway needs it to tunnel to the host's replicas: no key file, which is the gateway's own. */
export interface JumpHost {
  host: string;
  port: number;
  user: string;
  /** The jump host's key as its fleet verified it (absent while the fleet has not). */
  host_key_fingerprints?: string[];
  /**
   * The host itself, for a replica on its private address (`internal_ip`) with no proxy_jump: a
   * gateway connects straight to the replica first and goes through this host's SSH only when it
   * has no route there.
   */
  direct_first?: true;
}

/**
 * The proxy_jump of the host an SSH fleet instance is on, from its details' `target` (src/fleet/ssh-backend.ts
 * writes it); null for a host reached directly, or an instance of another backend. Pure and free of zod and
 * ssh2: the run's loop (workflow code) calls it to fill its routing table.
 */
export function jumpHostOf(details: Readonly<Record<string, string>>): JumpHost | null {
  const jump = targetOf(details)?.proxy_jump;
  return jump ? viaOf(jump) : null;
}

/** A straight connection to a host's private address is given this long before it goes through the host's SSH (the gateway's pools, the worker's reads). */
export const DIRECT_FIRST_TIMEOUT_MS = 1000;

/** What a straight connection that found no route fails with: then a `direct_first` replica is reached through its host. */
export const NO_ROUTE_CODES: ReadonlySet<string> = new Set(['EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'UND_ERR_CONNECT_TIMEOUT']);

/**
 * How a gateway reaches a replica on an SSH fleet's host: through the host's proxy_jump (jumpHostOf);
 * else, when the replica's address is the host's private one (`internal_ip`, not the name the fleet
 * reaches the host by), straight first and through the host's own SSH where that address has no
 * route; else null (straight only).
 */
export function replicaRouteOf(details: Readonly<Record<string, string>>, replicaIp: string): JumpHost | null {
  const target = targetOf(details);
  if (!target) return null;
  if (target.proxy_jump) return viaOf(target.proxy_jump);
  if (typeof target.hostname !== 'string' || target.hostname === replicaIp) return null;
  const own = viaOf(target);
  return own ? { ...own, direct_first: true } : null;
}

function targetOf(details: Readonly<Record<string, string>>): Partial<SshTarget> | null {
  if (details.target === undefined) return null;
  try {
    const target = JSON.parse(details.target) as unknown;
    return typeof target === 'object' && target !== null ? (target as Partial<SshTarget>) : null;
  } catch {
    return null;
  }
}

function viaOf(host: Partial<SshTarget>): JumpHost | null {
  if (typeof host.hostname !== 'string' || typeof host.port !== 'number' || typeof host.user !== 'string') return null;
  const keys = Array.isArray(host.host_key_fingerprints) ? host.host_key_fingerprints.filter((k): k is string => typeof k === 'string') : [];
  return { host: host.hostname, port: host.port, user: host.user, ...(keys.length > 0 ? { host_key_fingerprints: keys } : {}) };
}
