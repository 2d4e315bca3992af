import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { projectRoot } from '../project-root';

/**
 * Secret env values travel sealed: the submitting side encrypts them (AES-256-GCM) before they
 * enter workflow history, and only the activity that writes the job's env on its node opens them.
 * History, the Web UI, queries and error messages see `sealed:v3:…`.
 *
 * A sealed value is bound to its run: the associated data covers the variable's name, the run's
 * workflow id, a random nonce made once per submission and the time it was sealed (both carried in
 * the value). Copied into another run's plan, it does not open (another workflow id); copied into a
 * later run that reuses the same workflow id, an earlier execution of that id already carries its
 * nonce (seal-binding.ts): the seal time bounds where the worker looks for one.
 *
 * The key is shared by whoever submits and the workers: TROUPE_SECRET_KEY (base64, 32 bytes), or
 * the file TROUPE_SECRET_KEY_FILE (default `.troupe/secret.key` in the project, made on first use).
 */

const PREFIX = 'sealed:v3:';
/** Any version's prefix: a plain value that looks sealed is sealed too, so it reaches the job unchanged. */
const ANY_PREFIX = /^sealed:v\d+:/;

export class SecretKeyError extends Error {
  override readonly name = 'SecretKeyError';
}

export function isSealed(value: string): boolean {
  return ANY_PREFIX.test(value);
}

/** What a value is sealed for: the run's workflow id, the submission's nonce and when it was sealed (ms since the epoch, the sealing side's clock). */
export interface SealContext {
  runWorkflowId: string;
  nonce: string;
  sealedAtMs: number;
}

/** A submission's seal: a fresh nonce, sealed now. */
export function newSeal(runWorkflowId: string, nowMs = Date.now()): SealContext {
  return { runWorkflowId, nonce: newSealNonce(), sealedAtMs: nowMs };
}

/** A submission's nonce: 128 random bits, base64url (no `:`, so it sits in the sealed text as is). */
export function newSealNonce(): string {
  return randomBytes(16).toString('base64url');
}

const NONCE = /^[A-Za-z0-9_-]{16,64}$/;
const SEALED_AT = /^[1-9][0-9]{0,15}$/;

function associatedData(name: string, ctx: SealContext): Buffer {
  return Buffer.from(JSON.stringify(['troupe-sealed-env', 3, name, ctx.runWorkflowId, ctx.nonce, ctx.sealedAtMs]), 'utf8');
}

interface SealedParts {
  nonce: string;
  sealedAtMs: number;
  iv: Buffer;
  body: Buffer;
}

function partsOf(name: string, sealed: string): SealedParts {
  if (!sealed.startsWith(PREFIX)) {
    throw new SecretKeyError(
      `env ${name}: sealed in a format this worker no longer opens (${sealed.slice(0, 10)}…, without a seal time); submit the run again with troupe apply`,
    );
  }
  const [sealedAt, nonce, ivText, bodyText, ...rest] = sealed.slice(PREFIX.length).split(':');
  if (!sealedAt || !SEALED_AT.test(sealedAt) || !nonce || !NONCE.test(nonce) || !ivText || !bodyText || rest.length > 0) {
    throw new SecretKeyError(`env ${name}: malformed sealed value`);
  }
  const body = Buffer.from(bodyText, 'base64');
  if (body.length < 16) throw new SecretKeyError(`env ${name}: malformed sealed value`);
  return { nonce, sealedAtMs: Number(sealedAt), iv: Buffer.from(ivText, 'base64'), body };
}

/** A sealed value's submission: its nonce and seal time (checked for shape, not opened: authenticated only when it opens). */
export interface SealedEntry {
  name: string;
  nonce: string;
  sealedAtMs: number;
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

export function sealValue(name: string, value: string, key: Buffer, ctx: SealContext): string {
  if (!NONCE.test(ctx.nonce)) throw new SecretKeyError(`env ${name}: a seal nonce must be 16-64 base64url characters`);
  if (!SEALED_AT.test(String(ctx.sealedAtMs))) throw new SecretKeyError(`env ${name}: a seal time must be a positive whole number of ms`);
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(associatedData(name, ctx));
  const body = Buffer.concat([cipher.update(value, 'utf8'), cipher.final(), cipher.getAuthTag()]);
  return `${PREFIX}${ctx.sealedAtMs}:${ctx.nonce}:${iv.toString('base64')}:${body.toString('base64')}`;
}

/** Opens a value sealed for the run `runWorkflowId`; any other run (or name, or key) is refused. */
export function openValue(name: string, sealed: string, key: Buffer, runWorkflowId: string): string {
  const { nonce, sealedAtMs, iv, body } = partsOf(name, sealed);
  const decipher = createDecipheriv('aes-256-gcm', key, iv);
  decipher.setAAD(associatedData(name, { runWorkflowId, nonce, sealedAtMs }));
  decipher.setAuthTag(body.subarray(body.length - 16));
  try {
    return Buffer.concat([decipher.update(body.subarray(0, body.length - 16)), decipher.final()]).toString('utf8');
  } catch {
    throw new SecretKeyError(
      `env ${name}: the sealed value does not open for run ${runWorkflowId}: it was sealed for another run or with another key (is TROUPE_SECRET_KEY the submitter's?)`,
    );
  }
}

/** Seals the named values of an env for one run (the others stay as they are); a value is sealed once, whatever it looks like. */
export function sealEnv(env: Readonly<Record<string, string>>, secretNames: readonly string[], key: Buffer, ctx: SealContext): Record<string, string> {
  const out: Record<string, string> = { ...env };
  for (const name of secretNames) {
    const value = env[name];
    if (value !== undefined) out[name] = sealValue(name, value, key, ctx);
  }
  return out;
}

/** The sealed entries of an env, with their nonces and seal times: what the worker binds before opening. */
export function sealedEntries(env: Readonly<Record<string, string>>): SealedEntry[] {
  return Object.entries(env)
    .filter(([, v]) => isSealed(v))
    .map(([name, v]) => {
      const { nonce, sealedAtMs } = partsOf(name, v);
      return { name, nonce, sealedAtMs };
    });
}

/** Opens every sealed value of an env for the run `runWorkflowId`; loads the key only when there is something to open. */
export function openEnv(env: Readonly<Record<string, string>>, key: () => Buffer, runWorkflowId: string): Record<string, string> {
  const sealed = Object.entries(env).filter(([, v]) => isSealed(v));
  if (sealed.length === 0) return { ...env };
  const k = key();
  return Object.fromEntries(Object.entries(env).map(([name, v]) => [name, isSealed(v) ? openValue(name, v, k, runWorkflowId) : v]));
}
