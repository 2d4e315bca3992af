import type { SshTarget } from './target';

/** A host's proxy_jump as the gateway needs it to tunnel to the host's replicas: no key file, which is the gateway's own. */
export interface JumpHost {
  host: string;
  port: number;
  user: string;
  /** The jump host's key as its fleet verified it (absent while the fleet has not). */
  host_key_fingerprints?: string[];
}

/**
 * The proxy_jump of the host an SSH fleet instance is on, from its details' `target` (src/fleet/ssh-backend.ts
 * writes it); null for a host reached directly, or an instance of another backend. Pure and free of zod and
 * ssh2: the run's loop (workflow code) calls it to fill its routing table.
 */
export function jumpHostOf(details: Readonly<Record<string, string>>): JumpHost | null {
  if (details.target === undefined) return null;
  let target: Partial<SshTarget>;
  try {
    target = JSON.parse(details.target) as Partial<SshTarget>;
  } catch {
    return null;
  }
  const jump = target.proxy_jump;
  if (!jump || typeof jump.hostname !== 'string' || typeof jump.port !== 'number' || typeof jump.user !== 'string') return null;
  const keys = Array.isArray(jump.host_key_fingerprints) ? jump.host_key_fingerprints.filter((k): k is string => typeof k === 'string') : [];
  return { host: jump.hostname, port: jump.port, user: jump.user, ...(keys.length > 0 ? { host_key_fingerprints: keys } : {}) };
}
