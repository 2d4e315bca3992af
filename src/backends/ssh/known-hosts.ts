import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * OpenSSH known_hosts files: `[@marker] patterns keytype base64key [comment]`, where patterns are
 * comma-separated names or addresses with `*`/`?` wildcards and `!` negation, `[host]:port` for
 * ports other than 22, or one hashed name `|1|salt|hmac-sha1`. `@cert-authority` lines are
 * skipped (certificates are not supported); `@revoked` keys are refused.
 */

export interface KnownHostEntry {
  marker: 'revoked' | null;
  keyType: string;
  keyBlob: Buffer;
  /** `file:line`, for messages. */
  source: string;
}

interface ParsedLine extends KnownHostEntry {
  matches(hostString: string): boolean;
}

/** The name OpenSSH looks up: `host` on port 22, `[host]:port` otherwise. */
export function knownHostsName(hostname: string, port: number): string {
  return port === 22 ? hostname : `[${hostname}]:${port}`;
}

function wildcardToRegExp(pattern: string): RegExp {
  const escaped = pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replaceAll('*', '.*').replaceAll('?', '.');
  return new RegExp(`^${escaped}$`, 'i');
}

function hashedMatcher(field: string): ((name: string) => boolean) | null {
  const parts = field.split('|');
  // "|1|salt|hash" splits into ["", "1", salt, hash]
  if (parts.length !== 4 || parts[0] !== '' || parts[1] !== '1') return null;
  const salt = Buffer.from(parts[2] ?? '', 'base64');
  const expected = Buffer.from(parts[3] ?? '', 'base64');
  if (salt.length === 0 || expected.length !== 20) return null;
  return (name) => {
    const actual = createHmac('sha1', salt).update(name).digest();
    return timingSafeEqual(actual, expected);
  };
}

function patternMatcher(field: string): (name: string) => boolean {
  const patterns = field.split(',').filter(Boolean);
  const positive = patterns.filter((p) => !p.startsWith('!')).map(wildcardToRegExp);
  const negative = patterns.filter((p) => p.startsWith('!')).map((p) => wildcardToRegExp(p.slice(1)));
  return (name) => !negative.some((re) => re.test(name)) && positive.some((re) => re.test(name));
}

function parseLine(line: string, source: string): ParsedLine | null {
  const trimmed = line.trim();
  if (!trimmed || trimmed.startsWith('#')) return null;
  const fields = trimmed.split(/\s+/);
  let marker: string | null = null;
  if (fields[0]?.startsWith('@')) marker = fields.shift() ?? null;
  if (marker !== null && marker !== '@revoked') return null;
  const [hosts, keyType, keyBase64] = fields;
  if (!hosts || !keyType || !keyBase64) return null;
  const keyBlob = Buffer.from(keyBase64, 'base64');
  if (keyBlob.length === 0) return null;
  const matcher = hosts.startsWith('|') ? hashedMatcher(hosts) : patternMatcher(hosts);
  if (!matcher) return null;
  return { marker: marker === '@revoked' ? 'revoked' : null, keyType, keyBlob, source, matches: matcher };
}

/** Entries of one known_hosts text that apply to `hostname:port`. */
export function findKnownHostEntries(text: string, file: string, hostname: string, port: number): KnownHostEntry[] {
  const name = knownHostsName(hostname, port);
  const out: KnownHostEntry[] = [];
  text.split('\n').forEach((line, index) => {
    const parsed = parseLine(line, `${file}:${index + 1}`);
    if (parsed?.matches(name)) {
      out.push({ marker: parsed.marker, keyType: parsed.keyType, keyBlob: parsed.keyBlob, source: parsed.source });
    }
  });
  return out;
}

/** One known_hosts line for a key, in plain (not hashed) form, as a caller records a pinned key. */
export function formatKnownHostsLine(hostname: string, port: number, keyType: string, keyBlob: Buffer): string {
  return `${knownHostsName(hostname, port)} ${keyType} ${keyBlob.toString('base64')}`;
}
