import type { Client, ClientChannel, SFTPWrapper } from 'ssh2';
import { Slots } from '../../concurrency/slots';
import { CONTROL_SHELL_COMMAND, ControlShell, type CommandResult } from './control-shell';
import { SshConnectionLostError, SshError, SshTimeoutError } from './errors';
import type { VerifiedHostKey } from './host-key-trust';
import type { SshTarget } from './target';
import type { SshTimeouts } from './timeouts';

export type { CommandResult } from './control-shell';

export interface ExecOptions {
  /** Deadline for this command; the session's `commandMs` when omitted. */
  timeoutMs?: number;
  stdin?: string | Buffer;
}

/**
 * OpenSSH allows 10 session channels per connection (MaxSessions); we stay below so multiplexed
 * callers queue instead of failing with "open failed".
 */
export const MAX_SESSION_CHANNELS = 8;

/**
 * Control shells per connection (each holds a channel for as long as the connection lives): the
 * commands of a host run in these, up to this many at once, and only opening one pays the login
 * shell's rc files.
 */
export const MAX_CONTROL_SHELLS = 4;

/** How long a closed connection waits for the host's side of the close before it is dropped. */
const CLOSE_GRACE_MS = 2_000;


type Settle = { settled: () => boolean; onSettle: (fn: () => void) => void };

/**
 * One authenticated connection to a host, shared by every caller (see connectSsh). Commands run
 * in channels multiplexed over it. Each wait is bounded: a command by its deadline, everything
 * by the connection's keepalive, which fails every pending call with SshConnectionLostError.
 */
/** Connections open in this process, and how many ended without Troupe closing them (the worker's metrics read these). */
const live = new Set<SshSession>();
let lostConnections = 0;

export interface SshSessionStats {
  connections: number;
  /** Distinct hosts with an open connection. */
  hosts: number;
  controlShells: number;
  /** Connections lost so far (keepalive, reset, host gone), not counting closes by Troupe. */
  lost: number;
}

export function sshSessionStats(): SshSessionStats {
  const sessions = [...live];
  return {
    connections: sessions.length,
    hosts: new Set(sessions.map((s) => s.host)).size,
    controlShells: sessions.reduce((sum, s) => sum + s.controlShellsOpen, 0),
    lost: lostConnections,
  };
}

export class SshSession {
  private lostError: SshError | null = null;
  private readonly lostListeners = new Set<(err: SshError) => void>();
  private readonly slots = new Slots(MAX_SESSION_CHANNELS);
  private sftpChannel: Promise<SFTPWrapper> | null = null;
  private active = 0;
  private idleTimer: NodeJS.Timeout | null = null;
  private readonly idleShells: ControlShell[] = [];
  /** Control shells open, in use or being opened. */
  private shellCount = 0;
  private readonly shellWaiters: Array<{ resolve: (shell: ControlShell) => void; reject: (err: unknown) => void }> = [];
  /** Commands sent to the host so far (what a bench or a test counts). */
  commandsSent = 0;
  /** close() was called: the end is Troupe's, not a lost host. */
  private closing = false;

  constructor(
    readonly target: SshTarget,
    /** `user@host:port` (with the jump chain), as every error names it. */
    readonly host: string,
    readonly hostKey: VerifiedHostKey,
    /** The session this one tunnels through, if the target has a proxy_jump. */
    readonly jump: SshSession | null,
    private readonly client: Client,
    readonly timeouts: SshTimeouts,
  ) {
    live.add(this);
    this.scheduleIdleClose();
  }

  get controlShellsOpen(): number {
    return this.shellCount;
  }

  /** True once the connection is gone; a pooled lookup then makes a new one. */
  get closed(): boolean {
    return this.lostError !== null;
  }

  /** Why the connection ended, once it has. */
  get lostReason(): SshError | null {
    return this.lostError;
  }

  /** Called by connectSsh when the client reports an error or closes. */
  markLost(err: SshError): void {
    if (this.lostError) return;
    this.lostError = err;
    live.delete(this);
    if (!this.closing) lostConnections += 1;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    for (const listener of [...this.lostListeners]) listener(err);
    this.lostListeners.clear();
  }

  /** Calls `listener` once when the connection is lost (at once if it already is). */
  onLost(listener: (err: SshError) => void): void {
    if (this.lostError) listener(this.lostError);
    else this.lostListeners.add(listener);
  }

  close(): void {
    this.closing = true;
    this.markLost(new SshConnectionLostError(this.host, `${this.host}: connection closed by Troupe`));
    this.client.end();
    // A host that never answers the close (gone, or its network cut) must not keep the socket, and
    // the process with it, open: the connection is dropped after a short grace.
    const force = setTimeout(() => this.client.destroy(), CLOSE_GRACE_MS);
    force.unref();
    this.client.once('close', () => clearTimeout(force));
  }

  /**
   * Opens an exec channel. sshd may refuse one for a moment even below its MaxSessions (channels
   * just closed on our side are not yet gone on its side): a refusal is retried a few times.
   */
  private async openExecChannel(command: string): Promise<ClientChannel> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await new Promise<ClientChannel>((resolve, reject) =>
          this.client.exec(command, (err, channel) => (err ? reject(err) : resolve(channel))),
        );
      } catch (err) {
        const refused = typeof (err as { reason?: unknown }).reason === 'number';
        if (!refused || attempt >= 5 || this.lostError) throw err;
        await new Promise((r) => setTimeout(r, 50 * attempt));
      }
    }
  }

  /**
   * Runs a bash script (bash --noprofile --norc -c) in one of the connection's control shells and
   * collects its output, whatever the exit code. At its deadline the script's process group is
   * killed on the host (exit code 137).
   */
  exec(script: string, options: ExecOptions = {}): Promise<CommandResult> {
    const timeoutMs = options.timeoutMs ?? this.timeouts.commandMs;
    return this.guarded('command', timeoutMs, `bash -c ${firstLine(script)}`, async ({ settled }) => {
      const shell = await this.takeShell();
      try {
        if (settled()) throw new SshError(this.host, 'command abandoned');
        this.commandsSent += 1;
        return await shell.run(script, timeoutMs, options.stdin);
      } finally {
        this.giveBackShell(shell);
      }
    });
  }

  /** An idle control shell, a new one while there are fewer than MAX_CONTROL_SHELLS, or the next one given back. */
  private async takeShell(): Promise<ControlShell> {
    for (let shell = this.idleShells.pop(); shell; shell = this.idleShells.pop()) {
      if (!shell.ended) return shell;
      this.shellCount -= 1;
    }
    if (this.shellCount >= MAX_CONTROL_SHELLS) {
      return new Promise((resolve, reject) => this.shellWaiters.push({ resolve, reject }));
    }
    this.shellCount += 1;
    try {
      return await this.openControlShell();
    } catch (err) {
      this.shellCount -= 1;
      throw err;
    }
  }

  private giveBackShell(shell: ControlShell): void {
    if (shell.ended) {
      this.shellCount -= 1;
      const waiter = this.shellWaiters.shift();
      if (waiter) this.takeShell().then(waiter.resolve, waiter.reject);
      return;
    }
    const waiter = this.shellWaiters.shift();
    if (waiter) waiter.resolve(shell);
    else this.idleShells.push(shell);
  }

  /** An exec channel that holds one of the connection's channel slots until it closes. */
  private async openSlottedChannel(command: string): Promise<ClientChannel> {
    await this.slots.acquire();
    let channel: ClientChannel;
    try {
      channel = await this.openExecChannel(command);
    } catch (err) {
      this.slots.release();
      throw err;
    }
    channel.once('close', () => this.slots.release());
    return channel;
  }

  /** A control shell holds one of the connection's channel slots until it ends. */
  private async openControlShell(): Promise<ControlShell> {
    const channel = await this.openSlottedChannel(CONTROL_SHELL_COMMAND);
    const shell = new ControlShell(channel, this.host);
    await shell.ready(this.timeouts.commandMs);
    return shell;
  }

  /** One SFTP operation (the SFTP channel is opened once and shared), bounded like a command. */
  sftp<T>(what: string, operation: (sftp: SFTPWrapper) => Promise<T>, timeoutMs?: number): Promise<T> {
    return this.guarded('transfer', timeoutMs ?? this.timeouts.commandMs, what, async () => {
      const sftp = await this.openSftp();
      return operation(sftp);
    });
  }

  /**
   * A channel that stays open until closed (a job watcher): it holds a channel slot and keeps the
   * connection from closing when idle, for as long as it is open.
   */
  openLongLived(command: string, timeoutMs: number): Promise<ClientChannel> {
    return this.guarded('command', timeoutMs, firstLine(command), async ({ settled }) => {
      const channel = await this.openSlottedChannel(command);
      this.active += 1;
      this.cancelIdleClose();
      channel.once('close', () => {
        this.active -= 1;
        this.scheduleIdleClose();
      });
      if (settled()) {
        channel.close();
        throw new SshError(this.host, 'channel abandoned');
      }
      return channel;
    });
  }

  /** A TCP stream from the host to `hostname:port` (how proxy_jump reaches the next host). */
  forwardOut(hostname: string, port: number, timeoutMs: number): Promise<ClientChannel> {
    return this.guarded('connect', timeoutMs, `forwarding to ${hostname}:${port}`, async ({ settled }) => {
      const stream = await new Promise<ClientChannel>((resolve, reject) =>
        this.client.forwardOut('127.0.0.1', 0, hostname, port, (err, channel) => (err ? reject(err) : resolve(channel))),
      );
      if (settled()) {
        stream.close();
        throw new SshError(this.host, 'forwarding abandoned');
      }
      // The tunnel keeps this (jump) connection busy for as long as it is open.
      this.active += 1;
      this.cancelIdleClose();
      stream.once('close', () => {
        this.active -= 1;
        this.scheduleIdleClose();
      });
      return stream;
    });
  }

  private openSftp(): Promise<SFTPWrapper> {
    if (!this.sftpChannel) {
      const opening = (async () => {
        await this.slots.acquire();
        try {
          const sftp = await new Promise<SFTPWrapper>((resolve, reject) =>
            this.client.sftp((err, channel) => (err ? reject(err) : resolve(channel))),
          );
          sftp.once('close', () => {
            this.sftpChannel = null;
            this.slots.release();
          });
          return sftp;
        } catch (err) {
          this.slots.release();
          throw err;
        }
      })();
      this.sftpChannel = opening;
      opening.catch(() => {
        if (this.sftpChannel === opening) this.sftpChannel = null;
      });
    }
    return this.sftpChannel;
  }

  private guarded<T>(
    phase: 'command' | 'transfer' | 'connect',
    timeoutMs: number,
    detail: string,
    body: (settle: Settle) => Promise<T>,
  ): Promise<T> {
    if (this.lostError) return Promise.reject(this.lostError);
    this.active += 1;
    this.cancelIdleClose();
    return new Promise<T>((resolve, reject) => {
      let done = false;
      const hooks: Array<() => void> = [];
      const finish = (settle: () => void): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        this.lostListeners.delete(onLost);
        for (const hook of hooks) {
          try {
            hook();
          } catch {
            // The channel may already be gone; closing it is best effort.
          }
        }
        this.active -= 1;
        this.scheduleIdleClose();
        settle();
      };
      const timer = setTimeout(() => finish(() => reject(new SshTimeoutError(this.host, phase, timeoutMs, detail))), timeoutMs);
      const onLost = (err: SshError): void => finish(() => reject(err));
      this.lostListeners.add(onLost);
      body({ settled: () => done, onSettle: (fn) => hooks.push(fn) }).then(
        (value) => finish(() => resolve(value)),
        (err: unknown) =>
          finish(() => reject(this.lostError ?? (err instanceof SshError ? err : new SshError(this.host, `${this.host}: ${detail}: ${(err as Error).message}`, { cause: err })))),
      );
    });
  }

  private cancelIdleClose(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }

  private scheduleIdleClose(): void {
    if (this.active > 0 || this.lostError || this.timeouts.idleCloseMs <= 0) return;
    this.cancelIdleClose();
    this.idleTimer = setTimeout(() => {
      if (this.active === 0) this.close();
    }, this.timeouts.idleCloseMs);
    this.idleTimer.unref();
  }
}

function firstLine(script: string): string {
  const line = script.trim().split('\n')[0] ?? '';
  return line.length > 60 ? `${line.slice(0, 57)}...` : line;
}
