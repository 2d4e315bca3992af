import { createHash } from 'node:crypto';

/** What OpenSSH prints for a key: `SHA256:` and the unpadded base64 of the SHA-256 of the key blob. */
export function fingerprintOf(keyBlob: Buffer): string {
  return `SHA256:${createHash('sha256').update(keyBlob).digest('base64').replace(/=+$/, '')}`;
}

/** Accepts `SHA256:abc`, `SHA256:abc=` or `abc`; returns the canonical `SHA256:abc`. */
export function normalizeFingerprint(fingerprint: string): string {
  const body = fingerprint.trim().replace(/^SHA256:/i, '').replace(/=+$/, '');
  return `SHA256:${body}`;
}

/** The key type written at the start of an SSH public key blob (`ssh-ed25519`, `ssh-rsa`, ...). */
export function keyAlgorithmOf(keyBlob: Buffer): string {
  if (keyBlob.length < 4) return 'unknown';
  const len = keyBlob.readUInt32BE(0);
  if (len > 64 || 4 + len > keyBlob.length) return 'unknown';
  return keyBlob.subarray(4, 4 + len).toString('latin1');
}

/** Host key algorithms ssh2 negotiates for a key type, best first (an RSA key serves three). */
export function negotiableAlgorithms(keyType: string): string[] {
  if (keyType === 'ssh-rsa') return ['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa'];
  return [keyType];
}
