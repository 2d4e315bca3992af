import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { projectRoot } from '../project-root';

/**
 * Secret env values travel sealed: the submitting side encrypts them (AES-256-GCM, the env name as
 * associated data) before they enter workflow history, and only the activity that writes the job's
 * env on its node opens them. History, the Web UI, queries and error messages see `sealed:v1:…`.
 *
 * The key is shared by whoever submits and the workers: TROUPE_SECRET_KEY (base64, 32 bytes), or
 * the file TROUPE_SECRET_KEY_FILE (default `.troupe/secret.key` in the project, made on first use).
 */

const PREFIX = 'sealed:v1:';

export class SecretKeyError extends Error {
  override readonly name = 'SecretKeyError';
}

export function isSealed(value: string): boolean {
  return value.startsWith(PREFIX);
}

export function secretKeyFile(): string {
  return process.env.TROUPE_SECRET_KEY_FILE ?? join(projectRoot, '.troupe', 'secret.key');
}

function decodeKey(text: string, where: string): Buffer {
  const key = Buffer.from(text.trim(), 'base64');
  if (key.length !== 32) throw new SecretKeyError(`${where}: the secret key must be 32 bytes, base64-encoded (got ${key.length} bytes)`);
  return key;
}

/** The key to seal or open secrets with; `create` makes the key file (mode 0600) when there is none. */
export function loadSecretKey(opts: { create: boolean }): Buffer {
  const fromEnv = process.env.TROUPE_SECRET_KEY;
  if (fromEnv) return decodeKey(fromEnv, 'TROUPE_SECRET_KEY');
  const file = secretKeyFile();
  if (existsSync(file)) {
    const mode = readFileMode(file);
    if ((mode & 0o077) !== 0) {
      throw new SecretKeyError(`${file}: the secret key file is readable by group or others (mode ${mode.toString(8)}); run chmod 600 ${file}`);
    }
    return decodeKey(readFileSync(file, 'utf8'), file);
  }
  if (!opts.create) {
    throw new SecretKeyError(`no secret key: set TROUPE_SECRET_KEY or TROUPE_SECRET_KEY_FILE (the same key the submitting side used), looked for ${file}`);
  }
  const key = randomBytes(32);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${key.toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
  chmodSync(file, 0o600);
  return key;
}

function readFileMode(file: string): number {
  return statSync(file).mode & 0o777;
}

export function sealValue(name: string, value: string, key: Buffer): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(name, 'utf8'));
  const body = Buffer.concat([cipher.update(value, 'utf8'), cipher.final(), cipher.getAuthTag()]);
  return `${PREFIX}${iv.toString('base64')}:${body.toString('base64')}`;
}

export function openValue(name: string, sealed: string, key: Buffer): string {
  const [ivText, bodyText] = sealed.slice(PREFIX.length).split(':');
  if (!ivText || !bodyText) throw new SecretKeyError(`env ${name}: malformed sealed value`);
  const body = Buffer.from(bodyText, 'base64');
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(ivText, 'base64'));
  decipher.setAAD(Buffer.from(name, 'utf8'));
  decipher.setAuthTag(body.subarray(body.length - 16));
  try {
    return Buffer.concat([decipher.update(body.subarray(0, body.length - 16)), decipher.final()]).toString('utf8');
  } catch {
    throw new SecretKeyError(`env ${name}: cannot open the sealed value with this worker's key (is TROUPE_SECRET_KEY the submitter's?)`);
  }
}

/** Seals the named values of an env (the others stay as they are); a value is sealed once, whatever it looks like. */
export function sealEnv(env: Readonly<Record<string, string>>, secretNames: readonly string[], key: Buffer): Record<string, string> {
  const out: Record<string, string> = { ...env };
  for (const name of secretNames) {
    const value = env[name];
    if (value !== undefined) out[name] = sealValue(name, value, key);
  }
  return out;
}

/** Opens every sealed value of an env; loads the key only when there is something to open. */
export function openEnv(env: Readonly<Record<string, string>>, key: () => Buffer): Record<string, string> {
  const sealed = Object.entries(env).filter(([, v]) => isSealed(v));
  if (sealed.length === 0) return { ...env };
  const k = key();
  return Object.fromEntries(Object.entries(env).map(([name, v]) => [name, isSealed(v) ? openValue(name, v, k) : v]));
}
