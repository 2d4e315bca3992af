import { SshError } from './errors';

/**
 * A long-lived bash on a host that runs Troupe's own commands one after the other, so that only
 * its start pays the login shell's rc files (sshd runs every exec request through the user's
 * login shell, and Debian's bash reads ~/.bashrc for each one: ~150 ms of `pyenv init` on the test
 * hosts). The job's commands are not run here; they still start in the login environment, which
 * this shell inherited.
 *
 * Protocol, on the channel's stdin and stdout: Troupe sends one line per command,
 * `__troupe_run ID SECONDS SCRIPTLEN STDINLEN ENCODING`, then the script's and the stdin's bytes;
 * the shell reads them with builtins, runs the script in its own `bash --noprofile --norc -c`
 * under `timeout -s KILL SECONDS` (its process group ends at the deadline), with the stdin in a
 * file and its output in files of a private temporary directory, then answers
 * `\x1eTROUPE ID CODE OUTLEN ERRLEN\n` followed by the output and the error output. A stdin with a
 * NUL byte (which a bash string cannot hold) goes base64-encoded (ENCODING `b64`, else `raw`).
 * Nothing else reaches stdout after the ready mark: whatever the rc files print comes before it
 * and is dropped. A command costs the host 3 process creations (timeout, stat, cat) and an exec of
 * bash: every one is milliseconds on a busy host, and a launch waits for several commands.
 */

export interface CommandResult {
  stdout: string;
  stderr: string;
  /** The script's exit status (137 when it was killed at its deadline). */
  exitCode: number | null;
  signal: string | null;
}

const READY_MARK = Buffer.from('\x1eTROUPE-READY\n');
const ANSWER_MARK = Buffer.from('\x1eTROUPE ');

/**
 * Sent once when the channel opens. The temporary directory is the shell's own (0700, named with
 * its pid) and removed when the shell ends; one left by a shell that was killed is removed by the
 * next one to start. The umask of the commands stays the login's.
 */
const PRELUDE = [
  'unset HISTFILE',
  'for __d in "${TMPDIR:-/tmp}"/troupe-ctl.*; do __p=${__d##*/troupe-ctl.}; __p=${__p%%.*}; [ -d "$__d" ] && ! kill -0 "$__p" 2>/dev/null && rm -rf "$__d"; done',
  '__T=$(mktemp -d "${TMPDIR:-/tmp}/troupe-ctl.$$.XXXXXX") || exit 97',
  "trap 'rm -rf \"$__T\"' EXIT",
  // The next $1 bytes of stdin into __s (byte count: C locale, local to the function).
  '__troupe_take() { local LC_ALL=C; IFS= read -r -N "$1" __s || [ "${#__s}" = "$1" ]; }',
  '__troupe_run() {',
  '  __troupe_take "$3" || exit 98',
  '  __c=$__s',
  '  __troupe_take "$4" || exit 98',
  '  if [ "$5" = b64 ]; then printf %s "$__s" | base64 -d; else printf %s "$__s"; fi > "$__T/i"',
  '  timeout -s KILL "$2" bash --noprofile --norc -c "$__c" < "$__T/i" > "$__T/o" 2> "$__T/e"',
  '  set -- "$1" "$?" $(stat -c %s "$__T/o" "$__T/e")',
  `  printf '\\036TROUPE %s %s %s %s\\n' "$@"`,
  '  cat "$__T/o" "$__T/e"',
  '}',
  "printf '\\036TROUPE-READY\\n'",
  '',
].join('\n');

/** The exec request that starts a control shell: the login shell runs it, then becomes a plain bash. */
export const CONTROL_SHELL_COMMAND = 'exec bash --noprofile --norc';

/** What the shell needs of its SSH channel (an ssh2 ClientChannel; a local process's pipes in tests). */
export interface ShellChannel {
  on(event: 'data', listener: (chunk: Buffer) => void): unknown;
  on(event: 'close', listener: () => void): unknown;
  stderr: { on(event: 'data', listener: (chunk: Buffer) => void): unknown };
  write(data: string | Buffer): unknown;
  close(): unknown;
}

interface Pending {
  id: number;
  resolve: (result: CommandResult) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export class ControlShell {
  private buffer: Buffer = Buffer.alloc(0);
  private isReady = false;
  private readonly readyWaiters: Array<{ resolve: () => void; reject: (err: Error) => void }> = [];
  private pending: Pending | null = null;
  private nextId = 1;
  private endedWith: Error | null = null;

  constructor(
    private readonly channel: ShellChannel,
    private readonly host: string,
  ) {
    channel.on('data', (chunk: Buffer) => this.take(chunk));
    // The rc files may write to stderr; the commands' own error output comes in the answers.
    channel.stderr.on('data', () => undefined);
    channel.on('close', () => this.end(new SshError(host, `${host}: the control shell ended`)));
    channel.write(PRELUDE);
  }

  /** True once the shell has ended (channel closed, killed at a deadline, or the connection lost). */
  get ended(): boolean {
    return this.endedWith !== null;
  }

  get busy(): boolean {
    return this.pending !== null;
  }

  /** Resolves once the shell has passed the rc files and defined its command function. */
  ready(timeoutMs: number): Promise<void> {
    if (this.isReady) return Promise.resolve();
    if (this.endedWith) return Promise.reject(this.endedWith);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new SshError(this.host, `${this.host}: the control shell did not start within ${timeoutMs} ms`));
        this.close();
      }, timeoutMs);
      this.readyWaiters.push({
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      });
    });
  }

  /**
   * Runs one script; the caller runs one at a time per shell. Past `timeoutMs` (a second after the
   * host's own `timeout` has ended the script) the shell is closed and the call fails.
   */
  run(script: string, timeoutMs: number, stdin?: string | Buffer): Promise<CommandResult> {
    if (this.endedWith) return Promise.reject(this.endedWith);
    if (this.pending) return Promise.reject(new SshError(this.host, `${this.host}: the control shell is busy`));
    const id = this.nextId++;
    const seconds = Math.ceil(timeoutMs / 1000) + 1;
    const body = Buffer.from(script, 'utf8');
    if (body.includes(0)) return Promise.reject(new SshError(this.host, `${this.host}: a script with a NUL byte cannot run`));
    const input = stdin === undefined ? Buffer.alloc(0) : typeof stdin === 'string' ? Buffer.from(stdin, 'utf8') : stdin;
    const binary = input.includes(0);
    const sent = binary ? Buffer.from(input.toString('base64'), 'latin1') : input;
    const line = Buffer.concat([Buffer.from(`__troupe_run ${id} ${seconds} ${body.length} ${sent.length} ${binary ? 'b64' : 'raw'}\n`), body, sent]);
    return new Promise<CommandResult>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.end(new SshError(this.host, `${this.host}: no answer from the control shell within ${seconds + 1} s`));
        this.close();
      }, (seconds + 1) * 1000);
      this.pending = { id, resolve, reject, timer };
      this.channel.write(line);
    });
  }

  close(): void {
    try {
      this.channel.close();
    } catch {
      // already closed
    }
  }

  private take(chunk: Buffer): void {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    if (!this.isReady) {
      const at = this.buffer.indexOf(READY_MARK);
      if (at < 0) {
        // Keep only what could be the start of the mark: rc files may print a lot.
        if (this.buffer.length > READY_MARK.length) this.buffer = this.buffer.subarray(this.buffer.length - READY_MARK.length);
        return;
      }
      this.buffer = this.buffer.subarray(at + READY_MARK.length);
      this.isReady = true;
      for (const waiter of this.readyWaiters.splice(0)) waiter.resolve();
    }
    this.answer();
  }

  /** Completes the pending command once its whole answer is in the buffer. */
  private answer(): void {
    const pending = this.pending;
    if (!pending || this.buffer.length === 0) return;
    if (this.buffer.indexOf(ANSWER_MARK) !== 0) {
      this.end(new SshError(this.host, `${this.host}: the control shell answered out of protocol`));
      this.close();
      return;
    }
    const eol = this.buffer.indexOf(0x0a);
    if (eol < 0) return;
    const [id, code, outLength, errLength] = this.buffer.subarray(ANSWER_MARK.length, eol).toString('latin1').split(' ').map(Number);
    if (id !== pending.id || [code, outLength, errLength].some((n) => n === undefined || !Number.isInteger(n))) {
      this.end(new SshError(this.host, `${this.host}: the control shell answered another command`));
      this.close();
      return;
    }
    const end = eol + 1 + (outLength ?? 0) + (errLength ?? 0);
    if (this.buffer.length < end) return;
    const body = this.buffer.subarray(eol + 1, end);
    this.buffer = this.buffer.subarray(end);
    clearTimeout(pending.timer);
    this.pending = null;
    pending.resolve({
      stdout: body.subarray(0, outLength).toString('utf8'),
      stderr: body.subarray(outLength).toString('utf8'),
      exitCode: code ?? null,
      signal: null,
    });
  }

  private end(err: Error): void {
    if (this.endedWith) return;
    this.endedWith = err;
    for (const waiter of this.readyWaiters.splice(0)) waiter.reject(err);
    const pending = this.pending;
    this.pending = null;
    if (pending) {
      clearTimeout(pending.timer);
      pending.reject(err);
    }
  }
}

