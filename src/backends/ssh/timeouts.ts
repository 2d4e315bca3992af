/**
 * Every SSH wait has a deadline, so a dead or hung host surfaces as a typed error, never a hang.
 * Worst case before a lost host is reported: keepaliveIntervalMs × keepaliveCountMax (15 s by
 * default) for an established connection, connectMs + handshakeMs for a new one.
 */
export interface SshTimeouts {
  /** TCP connect (or the jump host's forwardOut) to the SSH port. */
  connectMs: number;
  /** From TCP connected to authenticated (banner, key exchange, host key check, auth). */
  handshakeMs: number;
  /** SSH-level keepalive on established connections… */
  keepaliveIntervalMs: number;
  /** …and how many may go unanswered before the connection counts as lost. */
  keepaliveCountMax: number;
  /** Default deadline of one remote command or file transfer; callers may give a longer one. */
  commandMs: number;
  /** A pooled connection with no channel open for this long is closed. */
  idleCloseMs: number;
}

export const DEFAULT_SSH_TIMEOUTS: Readonly<SshTimeouts> = Object.freeze({
  connectMs: 10_000,
  handshakeMs: 15_000,
  keepaliveIntervalMs: 5_000,
  keepaliveCountMax: 3,
  commandMs: 60_000,
  idleCloseMs: 60_000,
});

export function resolveTimeouts(overrides?: Partial<SshTimeouts>): SshTimeouts {
  return { ...DEFAULT_SSH_TIMEOUTS, ...overrides };
}
