import { homedir } from 'node:os';
import { join } from 'node:path';
import { connectSsh, detectHost, HostKeyTrust, pickInternalIp } from '../src/backends/ssh';
import type { ProbeHostInput, ProbeHostResult } from './index';

/** known_hosts files the worker checks host keys against (TROUPE_KNOWN_HOSTS, colon-separated). */
export function knownHostsFiles(): string[] {
  const configured = process.env.TROUPE_KNOWN_HOSTS;
  return configured ? configured.split(':').filter(Boolean) : [join(homedir(), '.ssh', 'known_hosts')];
}

export function createFleetActivities() {
  return {
    /**
     * Connects to a fleet host with its key verified (known_hosts, the config's fingerprints, the key
     * pinned at first contact; pinning only when none of them knows the host) and detects what it has.
     * An unreachable host is an answer, not an error: the fleet shows it with the reason.
     */
    async probeFleetHost({ spec, pinned_fingerprint }: ProbeHostInput): Promise<ProbeHostResult> {
      const configured = spec.target.host_key_fingerprints ?? [];
      const target = pinned_fingerprint ? { ...spec.target, host_key_fingerprints: [...configured, pinned_fingerprint] } : spec.target;
      const trust = new HostKeyTrust({ knownHostsFiles: knownHostsFiles(), allowPinning: pinned_fingerprint === null && configured.length === 0 });
      try {
        const session = await connectSsh(target, trust);
        const facts = await detectHost(session);
        const internal_ip = pickInternalIp(facts, { internal_ip: spec.internal_ip, network: spec.network });
        const { fingerprint, trustedBy } = session.hostKey;
        const source = pinned_fingerprint === fingerprint ? 'pinned' : trustedBy;
        return { ok: true, facts, internal_ip, host_key: { fingerprint, source } };
      } catch (err) {
        return { ok: false, reason: err instanceof Error ? err.message : String(err) };
      }
    },
  };
}
