import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { projectRoot } from '../project-root';

/**
 * The keys of the payload codec: every payload Troupe's clients and workers send to Temporal is
 * encrypted with the current key, and any key still listed can open what it encrypted earlier.
 *
 * TROUPE_CODEC_KEY_FILE (default `.troupe/codec.keys` in the project, beside the sealing key, made
 * on first use, mode 0600): one base64 32-byte key a line, the first is the current one; `#`
 * starts a comment. Rotate by putting a new key on the first line and keeping the old ones below
 * as long as histories encrypted with them are read. A key's id is its fingerprint, so the file
 * holds no names to keep in step.
 */

export class CodecKeyError extends Error {
  override readonly name = 'CodecKeyError';
}

export interface CodecKey {
  id: string;
  key: Buffer;
}

export interface CodecKeyring {
  /** Encrypts every new payload. */
  current: CodecKey;
  /** Every key that may open a payload, by id (the current one too). */
  byId: ReadonlyMap<string, Buffer>;
}

export function codecKeyFile(env: Record<string, string | undefined> = process.env): string {
  return env.TROUPE_CODEC_KEY_FILE ?? join(projectRoot, '.troupe', 'codec.keys');
}

/** A key's id: the start of its SHA-256, so two sides holding the same key agree on its name. */
export function codecKeyId(key: Buffer): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 16);
}

export function keyringOf(keys: readonly Buffer[]): CodecKeyring {
  const [first] = keys;
  if (!first) throw new CodecKeyError('a codec keyring needs at least one key');
  return {
    current: { id: codecKeyId(first), key: first },
    byId: new Map(keys.map((key) => [codecKeyId(key), key])),
  };
}

/** Parses a key file's text: keys, newest first. */
export function parseCodecKeys(text: string, file: string): Buffer[] {
  const keys: Buffer[] = [];
  text.split('\n').forEach((raw, index) => {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') return;
    const key = Buffer.from(line, 'base64');
    if (key.length !== 32 || key.toString('base64') !== line) {
      throw new CodecKeyError(`${file}:${index + 1}: a codec key must be 32 bytes, base64-encoded (got ${key.length} bytes)`);
    }
    keys.push(key);
  });
  if (keys.length === 0) throw new CodecKeyError(`${file}: no codec key in the file (one base64 32-byte key a line, the current one first)`);
  return keys;
}

/** The keyring from the key file; `create` makes the file with one new key when there is none. */
export function loadCodecKeyring(opts: { create: boolean; file?: string }): CodecKeyring {
  const file = opts.file ?? codecKeyFile();
  if (existsSync(file)) {
    const mode = statSync(file).mode & 0o777;
    if ((mode & 0o077) !== 0) {
      throw new CodecKeyError(`${file}: the codec key file is readable by group or others (mode ${mode.toString(8)}); run chmod 600 ${file}`);
    }
    return keyringOf(parseCodecKeys(readFileSync(file, 'utf8'), file));
  }
  if (!opts.create) {
    throw new CodecKeyError(`no codec key: set TROUPE_CODEC_KEY_FILE to the key file the workers use, looked for ${file}`);
  }
  const key = randomBytes(32);
  mkdirSync(dirname(file), { recursive: true });
  try {
    writeFileSync(file, `${key.toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    // Another process made it first (a worker and a client starting together): use theirs.
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return loadCodecKeyring({ create: false, file });
    throw err;
  }
  chmodSync(file, 0o600);
  return keyringOf([key]);
}
