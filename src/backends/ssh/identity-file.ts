import { readFile, stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import ssh2 from 'ssh2';
import { SshKeyFileError } from './errors';

export function expandHome(path: string): string {
  return path === '~' || path.startsWith('~/') ? homedir() + path.slice(1) : path;
}

/**
 * Reads a private key the way OpenSSH would accept it: a regular file that neither group nor
 * others can read (a key others can read is as good as leaked), unencrypted (no agent or
 * passphrase support yet), in a format ssh2 parses.
 */
export async function loadIdentityFile(path: string, host: string): Promise<Buffer> {
  const file = expandHome(path);
  let mode: number;
  try {
    const st = await stat(file);
    if (!st.isFile()) throw new SshKeyFileError(host, `identity file ${file} for ${host} is not a regular file`);
    mode = st.mode & 0o777;
  } catch (err) {
    if (err instanceof SshKeyFileError) throw err;
    throw new SshKeyFileError(host, `identity file ${file} for ${host} cannot be read: ${(err as Error).message}`, { cause: err });
  }
  if ((mode & 0o077) !== 0) {
    throw new SshKeyFileError(
      host,
      `identity file ${file} for ${host} is readable by group or others (mode ${mode.toString(8).padStart(4, '0')}): ` +
        `refusing to use it. Run: chmod 600 ${file}`,
    );
  }
  const key = await readFile(file);
  const parsed = ssh2.utils.parseKey(key);
  if (parsed instanceof Error) {
    const encrypted = /encrypted|passphrase/i.test(parsed.message);
    throw new SshKeyFileError(
      host,
      encrypted
        ? `identity file ${file} for ${host} is encrypted; passphrase-protected keys are not supported, use an unencrypted key kept mode 600`
        : `identity file ${file} for ${host} is not a private key ssh2 can read: ${parsed.message}`,
    );
  }
  return key;
}
