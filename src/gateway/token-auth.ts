import { createHash, timingSafeEqual } from 'node:crypto';

/** The SHA-256 of a token, hex: what a routing table holds instead of the token. */
export function tokenHash(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/** The token of an `Authorization: Bearer TOKEN` header; undefined when there is none. */
export function bearerToken(header: string | undefined): string | undefined {
  return /^Bearer\s+(\S+)\s*$/i.exec(header ?? '')?.[1];
}

/**
 * Whether `token` hashes to one of `hashes`. Every hash is compared, in constant time, whatever
 * matched first: the time taken says nothing about which stored token is near the one given.
 */
export function tokenMatchesHashes(token: string, hashes: readonly string[]): boolean {
  const given = createHash('sha256').update(token, 'utf8').digest();
  let found = false;
  for (const hash of hashes) {
    const stored = Buffer.from(hash, 'hex');
    if (stored.length === given.length && timingSafeEqual(stored, given)) found = true;
  }
  return found;
}

export type AuthVerdict = 'pass' | 'missing' | 'wrong';

/** A request's `Authorization` header against a table's hashes (null: the service is open). */
export function checkBearer(header: string | undefined, hashes: readonly string[] | null): AuthVerdict {
  if (hashes === null) return 'pass';
  const token = bearerToken(header);
  if (token === undefined) return 'missing';
  return tokenMatchesHashes(token, hashes) ? 'pass' : 'wrong';
}
