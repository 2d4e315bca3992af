import { readFile } from 'node:fs/promises';
import { SshHostKeyChangedError, SshHostKeyRevokedError, SshHostKeyUnknownError } from './errors';
import { fingerprintOf, keyAlgorithmOf, negotiableAlgorithms, normalizeFingerprint } from './host-key';
import { expandHome } from './identity-file';
import { findKnownHostEntries, formatKnownHostsLine, knownHostsName, type KnownHostEntry } from './known-hosts';
import { describeTarget, type SshTarget } from './target';

export type HostKeyTrustSource = 'known_hosts' | 'fingerprint' | 'pinned';

/** The key a host proved it holds, and why we believe it. */
export interface VerifiedHostKey {
  hostname: string;
  port: number;
  algorithm: string;
  fingerprint: string;
  /** Base64 key blob, as in known_hosts. */
  publicKey: string;
  trustedBy: HostKeyTrustSource;
  /** The line to append to a known_hosts file to trust this key next time. */
  knownHostsLine: string;
}

export interface HostKeyTrustOptions {
  /** OpenSSH known_hosts files, read at every connection; a missing file counts as empty. */
  knownHostsFiles?: string[];
  /**
   * Trust on first use: accept a host that no file or fingerprint knows, and report the key
   * (`trustedBy: 'pinned'`) so the caller records it and shows it. A key that differs from a
   * known one is refused regardless.
   */
  allowPinning?: boolean;
}

/** What is expected of one host before connecting: read once, then checked synchronously in the handshake. */
export interface HostKeyExpectation {
  target: SshTarget;
  knownKeys: KnownHostEntry[];
  revoked: KnownHostEntry[];
  /** From the target's `host_key_fingerprints`. */
  fingerprints: string[];
  /** The key this trust pinned earlier for the host, if any. */
  pinnedFingerprint: string | null;
  /** Host key algorithms to offer first, so the server presents the kind of key we know. */
  preferredAlgorithms: string[];
}

/**
 * Decides whether a presented host key is the host's. Keys pinned by this object are remembered
 * for its lifetime: a second connection presenting another key is refused as changed.
 */
export class HostKeyTrust {
  private readonly pinned = new Map<string, VerifiedHostKey>();

  constructor(private readonly options: HostKeyTrustOptions = {}) {}

  /** Keys pinned so far (trust on first use), for the caller to record. */
  pinnedKeys(): VerifiedHostKey[] {
    return [...this.pinned.values()];
  }

  async expectationFor(target: SshTarget): Promise<HostKeyExpectation> {
    const entries: KnownHostEntry[] = [];
    for (const file of this.options.knownHostsFiles ?? []) {
      const path = expandHome(file);
      let text: string;
      try {
        text = await readFile(path, 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw err;
      }
      entries.push(...findKnownHostEntries(text, path, target.hostname, target.port));
    }
    const knownKeys = entries.filter((e) => e.marker === null);
    const pin = this.pinned.get(knownHostsName(target.hostname, target.port));
    const preferred = [...new Set(knownKeys.flatMap((k) => negotiableAlgorithms(k.keyType)))];
    if (pin) preferred.unshift(...negotiableAlgorithms(pin.algorithm).filter((a) => !preferred.includes(a)));
    return {
      target,
      knownKeys,
      revoked: entries.filter((e) => e.marker === 'revoked'),
      fingerprints: (target.host_key_fingerprints ?? []).map(normalizeFingerprint),
      pinnedFingerprint: pin?.fingerprint ?? null,
      preferredAlgorithms: preferred,
    };
  }

  /** Throws a typed error unless the key is the expected one (or may be pinned). */
  verify(expectation: HostKeyExpectation, keyBlob: Buffer): VerifiedHostKey {
    const { target } = expectation;
    const host = describeTarget(target);
    const fingerprint = fingerprintOf(keyBlob);
    const algorithm = keyAlgorithmOf(keyBlob);
    const result = (trustedBy: HostKeyTrustSource): VerifiedHostKey => ({
      hostname: target.hostname,
      port: target.port,
      algorithm,
      fingerprint,
      publicKey: keyBlob.toString('base64'),
      trustedBy,
      knownHostsLine: formatKnownHostsLine(target.hostname, target.port, algorithm, keyBlob),
    });

    const revoked = expectation.revoked.find((e) => e.keyBlob.equals(keyBlob));
    if (revoked) throw new SshHostKeyRevokedError(host, fingerprint, revoked.source);

    if (expectation.knownKeys.some((e) => e.keyBlob.equals(keyBlob))) return result('known_hosts');
    if (expectation.fingerprints.includes(fingerprint)) return result('fingerprint');
    if (expectation.pinnedFingerprint === fingerprint) return result('pinned');

    const pinned = expectation.pinnedFingerprint === null ? [] : [expectation.pinnedFingerprint];
    const expected = [
      ...new Set([...expectation.knownKeys.map((e) => fingerprintOf(e.keyBlob)), ...expectation.fingerprints, ...pinned]),
    ];
    if (expected.length > 0) {
      const from = [
        ...new Set(expectation.knownKeys.map((e) => e.source)),
        ...(expectation.fingerprints.length > 0 ? ['host_key_fingerprints'] : []),
        ...(pinned.length > 0 ? ['the key pinned at first contact'] : []),
      ];
      throw new SshHostKeyChangedError(host, expected, fingerprint, algorithm, from);
    }
    if (!this.options.allowPinning) throw new SshHostKeyUnknownError(host, fingerprint, algorithm);
    const pin = result('pinned');
    this.pinned.set(knownHostsName(target.hostname, target.port), pin);
    return pin;
  }
}
