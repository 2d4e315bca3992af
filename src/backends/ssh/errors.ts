/**
 * Typed SSH failures. Every one names the host; `name` is what a Temporal failure's `type`
 * becomes, so callers can tell "host unreachable" (retry, then INSTANCE_UNREACHABLE) from a
 * security or configuration problem that retrying cannot fix.
 */
export class SshError extends Error {
  override name = 'SshError';
  constructor(
    /** `user@host:port` (with the jump chain when there is one). */
    readonly host: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The host presented a key that no known_hosts entry or configured fingerprint knows, and pinning was not allowed. */
export class SshHostKeyUnknownError extends SshError {
  override name = 'SshHostKeyUnknownError';
  constructor(
    host: string,
    readonly presentedFingerprint: string,
    readonly presentedAlgorithm: string,
  ) {
    super(
      host,
      `host key of ${host} is not known: it presented ${presentedAlgorithm} ${presentedFingerprint}. ` +
        'Add it to known_hosts or to the host\'s host_key_fingerprints after checking it out of band, or allow pinning it on first contact',
    );
  }
}

/** The host presented a key other than the one(s) expected: refused, whatever the caller allows. */
export class SshHostKeyChangedError extends SshError {
  override name = 'SshHostKeyChangedError';
  constructor(
    host: string,
    readonly expectedFingerprints: string[],
    readonly presentedFingerprint: string,
    readonly presentedAlgorithm: string,
    /** Where the expected keys come from: known_hosts files and/or the fleet config. */
    readonly expectedFrom: string[],
  ) {
    super(
      host,
      `HOST KEY CHANGED for ${host}: expected ${expectedFingerprints.join(' or ')} (from ${expectedFrom.join(', ')}), ` +
        `but the host presented ${presentedAlgorithm} ${presentedFingerprint}. Refusing to connect: someone may be ` +
        'intercepting the connection, or the host was reinstalled. If the change is expected, remove the old key and trust the new one',
    );
  }
}

/** The presented key is marked @revoked in known_hosts. */
export class SshHostKeyRevokedError extends SshError {
  override name = 'SshHostKeyRevokedError';
  constructor(host: string, readonly presentedFingerprint: string, file: string) {
    super(host, `host key ${presentedFingerprint} of ${host} is marked @revoked in ${file}: refusing to connect`);
  }
}

/** The identity file is missing, unreadable, unparsable or readable by group/others. */
export class SshKeyFileError extends SshError {
  override name = 'SshKeyFileError';
}

/** The server refused every key we offered (wrong key, or user not allowed). */
export class SshAuthenticationError extends SshError {
  override name = 'SshAuthenticationError';
}

/** Nothing listens on the port (TCP RST). */
export class SshConnectionRefusedError extends SshError {
  override name = 'SshConnectionRefusedError';
}

/** No route to the host, or the name does not resolve. */
export class SshHostUnreachableError extends SshError {
  override name = 'SshHostUnreachableError';
}

/** A connect, handshake or command deadline passed. `phase` says which. */
export class SshTimeoutError extends SshError {
  override name = 'SshTimeoutError';
  constructor(
    host: string,
    readonly phase: 'connect' | 'handshake' | 'command' | 'transfer',
    readonly timeoutMs: number,
    detail: string,
  ) {
    super(host, `${host}: ${phase} timed out after ${timeoutMs} ms (${detail})`);
  }
}

/** An established connection died: keepalives unanswered, reset, or the jump host went away. */
export class SshConnectionLostError extends SshError {
  override name = 'SshConnectionLostError';
}

/** A remote command exited non-zero where success was required. */
export class SshCommandError extends SshError {
  override name = 'SshCommandError';
  constructor(
    host: string,
    readonly what: string,
    readonly exitCode: number | null,
    readonly stderr: string,
  ) {
    super(host, `${host}: ${what} failed (exit ${exitCode ?? 'none'})${stderr.trim() ? `: ${stderr.trim().slice(0, 2000)}` : ''}`);
  }
}

/** True for failures that mean "cannot reach the host now" (worth retrying; INSTANCE_UNREACHABLE past a limit). */
export function isHostUnreachable(err: unknown): boolean {
  return (
    err instanceof SshConnectionRefusedError ||
    err instanceof SshHostUnreachableError ||
    err instanceof SshTimeoutError ||
    err instanceof SshConnectionLostError
  );
}
