import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { projectRoot } from '../project-root';
import { CodecKeyError } from './codec-keys';

/**
 * The codec server's token: a caller that is not the configured Web UI sends it as
 * `Authorization: Bearer <token>` (`temporal --codec-auth "Bearer <token>"`). TROUPE_CODEC_TOKEN,
 * or the file TROUPE_CODEC_TOKEN_FILE (default `.troupe/codec.token` beside the codec keys, made
 * on first use, mode 0600).
 */

export function codecTokenFile(env: Record<string, string | undefined> = process.env): string {
  return env.TROUPE_CODEC_TOKEN_FILE ?? join(projectRoot, '.troupe', 'codec.token');
}

export function loadCodecToken(opts: { create: boolean; file?: string }): string {
  if (process.env.TROUPE_CODEC_TOKEN) return process.env.TROUPE_CODEC_TOKEN;
  const file = opts.file ?? codecTokenFile();
  if (existsSync(file)) {
    const mode = statSync(file).mode & 0o777;
    if ((mode & 0o077) !== 0) throw new CodecKeyError(`${file}: the codec token file is readable by group or others (mode ${mode.toString(8)}); run chmod 600 ${file}`);
    const token = readFileSync(file, 'utf8').trim();
    if (token.length < 16) throw new CodecKeyError(`${file}: the codec token must be at least 16 characters`);
    return token;
  }
  if (!opts.create) throw new CodecKeyError(`no codec token: set TROUPE_CODEC_TOKEN or TROUPE_CODEC_TOKEN_FILE, looked for ${file}`);
  mkdirSync(dirname(file), { recursive: true });
  try {
    writeFileSync(file, `${randomBytes(24).toString('base64url')}\n`, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  chmodSync(file, 0o600);
  return loadCodecToken({ create: false, file });
}
