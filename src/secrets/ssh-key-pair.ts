import { createPrivateKey, createPublicKey } from 'node:crypto';

/**
 * An ed25519 key pair made from a 32-byte seed, in the formats OpenSSH reads: the private key as
 * an unencrypted `openssh-key-v1` file (what `ssh-keygen -t ed25519 -N ''` writes), the public
 * key as one `ssh-ed25519 <base64>` line. The same seed always gives the same pair, so keys
 * derived from a secret need not be stored anywhere.
 */
export interface SshKeyPair {
  /** `ssh-ed25519 AAAA…` (no comment). */
  publicKey: string;
  /** `-----BEGIN OPENSSH PRIVATE KEY-----` … */
  privateKey: string;
}

/** PKCS#8 wrapping of a raw ed25519 seed (RFC 8410): Node makes the key from seed bytes only this way. */
const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const KEY_TYPE = 'ssh-ed25519';

function sshString(data: Buffer | string): Buffer {
  const body = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
  const length = Buffer.alloc(4);
  length.writeUInt32BE(body.length);
  return Buffer.concat([length, body]);
}

function uint32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
}

export function ed25519FromSeed(seed: Buffer): SshKeyPair {
  if (seed.length !== 32) throw new Error(`an ed25519 seed is 32 bytes, got ${seed.length}`);
  const key = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: 'der', type: 'pkcs8' });
  const spki = createPublicKey(key).export({ format: 'der', type: 'spki' });
  const pub = spki.subarray(spki.length - 32);
  const blob = Buffer.concat([sshString(KEY_TYPE), sshString(pub)]);
  // The check number only tells a wrong passphrase on decryption; fixed, so the file is deterministic.
  const check = seed.readUInt32BE(0);
  let secret = Buffer.concat([uint32(check), uint32(check), sshString(KEY_TYPE), sshString(pub), sshString(Buffer.concat([seed, pub])), sshString('')]);
  const pad = Buffer.from(Array.from({ length: (8 - (secret.length % 8)) % 8 }, (_, i) => i + 1));
  secret = Buffer.concat([secret, pad]);
  const body = Buffer.concat([Buffer.from('openssh-key-v1\0', 'latin1'), sshString('none'), sshString('none'), sshString(''), uint32(1), sshString(blob), sshString(secret)]);
  const lines = body.toString('base64').match(/.{1,70}/g) ?? [];
  return {
    publicKey: `${KEY_TYPE} ${blob.toString('base64')}`,
    privateKey: ['-----BEGIN OPENSSH PRIVATE KEY-----', ...lines, '-----END OPENSSH PRIVATE KEY-----', ''].join('\n'),
  };
}
