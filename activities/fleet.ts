import { homedir } from 'node:os';
import { join } from 'node:path';
import {
  connectSsh,
  describeTarget,
  detectHost,
  HostKeyTrust,
  pickInternalIp,
  SshHostKeyChangedError,
  type HostFacts,
  type SshSession,
  type SshTarget,
  type VerifiedHostKey,
} from '../src/backends/ssh';
import { hostKeyFile } from '../src/fleet/host-key-file';
import type { FleetHostSpec, HostKey } from '../src/contract/fleet-messages';

/**
 * known_hosts files the worker checks fleet hosts' keys against: TROUPE_KNOWN_HOSTS
 * (colon-separated paths), else ~/.ssh/known_hosts. Read at every probe.
 */
export function knownHostsFiles(): string[] {
  const configured = process.env.TROUPE_KNOWN_HOSTS;
  return configured ? configured.split(':').filter(Boolean) : [join(homedir(), '.ssh', 'known_hosts')];
}

export interface ProbeHostInput {
  fleet: string;
  spec: FleetHostSpec;
  /** The key verified at an earlier probe: the host must still present it (or one known_hosts or the config lists). */
  host_key: HostKey | null;
  /** Same for the host's proxy_jump host. */
  jump_host_key: HostKey | null;
}

export type ProbeHostResult =
  | { ok: true; facts: HostFacts; internal_ip: string; host_key: HostKey; jump_host_key: HostKey | null }
  | { ok: false; reason: string };

/** The target with the earlier verified keys added to the accepted ones (the jump host's too). */
function withKnownKeys(target: SshTarget, hostKey: HostKey | null, jumpKey: HostKey | null): SshTarget {
  const add = (t: SshTarget, key: HostKey | null): SshTarget =>
    key ? { ...t, host_key_fingerprints: [...new Set([...(t.host_key_fingerprints ?? []), key.fingerprint])] } : t;
  const jump = target.proxy_jump ? add(target.proxy_jump, jumpKey) : undefined;
  return { ...add(target, hostKey), ...(jump ? { proxy_jump: jump } : {}) };
}

/** How the fleet records a key: an earlier key keeps its source and date (a pinned key stays "pinned"). */
function recorded(key: VerifiedHostKey, previous: HostKey | null, now: string): HostKey {
  if (previous && previous.fingerprint === key.fingerprint) return { ...previous, algorithm: key.algorithm, since: previous.since ?? now };
  return { fingerprint: key.fingerprint, source: key.trustedBy, algorithm: key.algorithm, since: now };
}

/** A changed key, said in terms of the fleet: what was verified where and when, what to check, how to accept it. */
function changedKeyMessage(err: SshHostKeyChangedError, previous: HostKey | null, keyFile: string): string {
  const earlier =
    previous === null
      ? null
      : previous.source === 'pinned'
        ? `the key pinned at first contact${previous.since ? ` on ${previous.since}` : ''}`
        : `the key verified at an earlier probe (${previous.source === 'known_hosts' ? 'known_hosts' : 'configured fingerprint'})`;
  const from = err.expectedFrom.map((f) => (f === 'host_key_fingerprints' && earlier ? earlier : f));
  return (
    `HOST KEY CHANGED for ${err.host}: expected ${err.expectedFingerprints.join(' or ')} (${[...new Set(from)].join('; ')}), ` +
    `but the host presents ${err.presentedAlgorithm} ${err.presentedFingerprint}. Refused: someone may be intercepting the ` +
    `connection, or the host was reinstalled. If the change is expected, check the new key on the host (ssh-keygen -lf ${keyFile}), ` +
    'add it to a known_hosts file the workers read (TROUPE_KNOWN_HOSTS), and apply the fleet again'
  );
}

export function createFleetActivities() {
  return {
    /**
     * Connects to a fleet host with its key verified — against known_hosts, the config's
     * fingerprints, or the key verified at an earlier probe — and detects what it has. A host that
     * nothing knows yet is pinned (trust on first use) and reported as such; a key that differs
     * from a known one is refused. An unreachable host is an answer, not an error: the fleet shows
     * it with the reason.
     */
    async probeFleetHost({ spec, host_key, jump_host_key }: ProbeHostInput): Promise<ProbeHostResult> {
      const target = withKnownKeys(spec.target, host_key, jump_host_key);
      // Pinning only ever applies to a target with no key known from anywhere (see HostKeyTrust).
      const trust = new HostKeyTrust({ knownHostsFiles: knownHostsFiles(), allowPinning: true });
      const now = new Date().toISOString();
      let session: SshSession | null = null;
      try {
        // A connection of its own: a pooled one opened earlier would show the key of that time.
        session = await connectSsh(target, trust, { pooled: false });
        const facts = await detectHost(session);
        const internal_ip = pickInternalIp(facts, { internal_ip: spec.internal_ip, network: spec.network });
        return {
          ok: true,
          facts,
          internal_ip,
          host_key: recorded(session.hostKey, host_key, now),
          jump_host_key: session.jump ? recorded(session.jump.hostKey, jump_host_key, now) : null,
        };
      } catch (err) {
        if (err instanceof SshHostKeyChangedError) {
          const isJump = spec.target.proxy_jump !== undefined && err.host === describeTarget(spec.target.proxy_jump);
          return { ok: false, reason: changedKeyMessage(err, isJump ? jump_host_key : host_key, hostKeyFile(err.presentedAlgorithm)) };
        }
        return { ok: false, reason: err instanceof Error ? err.message : String(err) };
      } finally {
        session?.close();
        session?.jump?.close();
      }
    },
  };
}
