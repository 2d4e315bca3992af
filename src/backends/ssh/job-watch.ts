import type { ClientChannel } from 'ssh2';
import type { SshSession } from './session';
import { quoteShellWord } from '../../runner/shell-quote';

/**
 * Job exits pushed from a host instead of polled: one watcher per host and worker, a bash loop of
 * builtins only (no process is created while jobs run). It owns a FIFO in the watchers directory;
 * a job's wrapper writes `exit <dir>` into every FIFO there when its commands end (after the exit
 * code is on disk, so nothing is lost when no watcher listens), and the watcher passes it on. The
 * watcher also looks at /proc once a second for the pids it was told to watch, for a wrapper that
 * was killed before it could write (`gone <dir>`), and says `tick` every 15 s, which ends it by
 * SIGPIPE if its channel is gone.
 *
 * A job's readiness loop (ready-loop.ts) says `ready <dir>` the same way once its outcome is on
 * disk. The worker trusts the watcher for a job only after a check on the host found the job
 * running (or its readiness still pending) while the watcher was already listening: an exit or an
 * outcome that came before cannot be missed. When the
 * watcher's channel closes (connection lost, host rebooted) every job is checked on the host
 * again, and a new watcher is started.
 */

export const WATCHER_READY_MARK = 'TROUPE-WATCH-READY';
const READY_MARK = `\x1e${WATCHER_READY_MARK}`;
/** How long a failed watcher start keeps its host's jobs checked on the host before another try. */
const RETRY_AFTER_MS = 5_000;
/** A job nobody asked about for this long is not watched any more (its activity went away). */
const FORGET_AFTER_MS = 60_000;

/** The watcher, started as an exec request (the login shell runs it once). */
export function watcherScript(watchersDir: string): string {
  const w = quoteShellWord(watchersDir);
  return [
    `w=${w}`,
    'mkdir -p "$w" && chmod 700 "$w" || exit 97',
    // FIFOs of watchers that are gone (their shell was killed before its trap ran).
    'for f in "$w"/*.fifo; do [ -p "$f" ] || continue; p=${f##*/}; p=${p%.fifo}; kill -0 "$p" 2>/dev/null || rm -f "$f"; done',
    'f="$w/$$.fifo"',
    'mkfifo -m 600 "$f" || exit 97',
    `trap 'rm -f "$f"' EXIT`,
    'exec 3<>"$f"',
    'declare -A pids',
    `printf '${READY_MARK}\\n'`,
    'n=0',
    'while :; do',
    '  if IFS= read -r -t 1 line <&3; then printf "%s\\n" "$line"; continue; fi',
    '  while read -r -t 0 <&0; do',
    '    IFS=" " read -r verb pid dir || exit 0',
    '    case $verb in watch) pids[$dir]=$pid ;; unwatch) unset "pids[$dir]" ;; esac',
    '  done',
    '  for dir in "${!pids[@]}"; do [ -e "/proc/${pids[$dir]}" ] || { printf "gone %s\\n" "$dir"; unset "pids[$dir]"; }; done',
    '  n=$((n + 1)); if [ $((n % 15)) -eq 0 ]; then printf "tick\\n"; fi',
    'done',
  ].join('\n');
}

interface Watched {
  pid: number;
  /** The watcher it was registered with. */
  epoch: number;
  /** The event counter when it was found running: a later event for it means "check again". */
  since: number;
  lastAsked: number;
}

export class JobWatch {
  private channel: ClientChannel | null = null;
  private starting: Promise<void> | null = null;
  private epoch = 0;
  private seq = 0;
  /** The event counter when the current watcher began to listen: a check that began before it cannot be vouched for. */
  private listeningFrom = 0;
  private failedAt = 0;
  private readonly watched = new Map<string, Watched>();
  private readonly lastEvent = new Map<string, number>();
  /** Jobs whose readiness was found pending on the host while the watcher listened. */
  private readonly awaitingReady = new Map<string, Omit<Watched, 'pid'>>();
  private readonly lastReadyEvent = new Map<string, number>();
  /** Jobs being checked on the host right now (their events count even before they are watched). */
  private readonly checking = new Map<string, number>();
  private sweeper: NodeJS.Timeout | null = null;

  constructor(
    private readonly watchersDir: string,
    private readonly session: () => Promise<SshSession>,
    private readonly startTimeoutMs: number,
  ) {}

  /** A check of the job on the host begins: returns the event counter to pass to watchRunning(). */
  begin(dir: string): number {
    this.checking.set(dir, (this.checking.get(dir) ?? 0) + 1);
    return this.seq;
  }

  /** That check has ended (whatever it found). */
  end(dir: string): void {
    const n = (this.checking.get(dir) ?? 1) - 1;
    if (n > 0) this.checking.set(dir, n);
    else this.checking.delete(dir);
  }

  /** The job's pid while the watcher vouches that it still runs; null: check on the host. */
  runningPid(dir: string): number | null {
    const entry = this.watched.get(dir);
    if (!entry || !this.channel || entry.epoch !== this.epoch || (this.lastEvent.get(dir) ?? 0) > entry.since) return null;
    entry.lastAsked = Date.now();
    return entry.pid;
  }

  /**
   * A check on the host that began at `since` (begin()) found the job running with `pid`: from now
   * on the watcher vouches for it, unless an event for it came in meanwhile.
   */
  async watchRunning(dir: string, pid: number, since: number): Promise<void> {
    await this.ensureStarted();
    const channel = this.channel;
    if (!channel || (this.lastEvent.get(dir) ?? 0) > since) return;
    this.watched.set(dir, { pid, epoch: this.epoch, since, lastAsked: Date.now() });
    channel.write(`watch ${pid} ${dir}\n`);
  }

  /** True while the watcher vouches that the job's readiness is still pending; false: read it on the host. */
  readinessPending(dir: string): boolean {
    const entry = this.awaitingReady.get(dir);
    if (!entry || !this.channel || entry.epoch !== this.epoch || (this.lastReadyEvent.get(dir) ?? 0) > entry.since) return false;
    entry.lastAsked = Date.now();
    return true;
  }

  /**
   * A read on the host that began at `since` found the job's readiness pending: the watcher vouches
   * from now on — only when it was already listening at `since`. A watcher started after the read
   * may have missed a `ready` said in between (readiness has no /proc check behind it, as exits
   * have): then the next ask reads the host again, with the watcher listening.
   */
  async watchReadiness(dir: string, since: number): Promise<void> {
    await this.ensureStarted();
    if (!this.channel || since < this.listeningFrom || (this.lastReadyEvent.get(dir) ?? 0) > since) return;
    this.awaitingReady.set(dir, { epoch: this.epoch, since, lastAsked: Date.now() });
  }

  /** Readiness is known (or no longer asked for): the watcher need not vouch for it. */
  forgetReadiness(dir: string): void {
    this.awaitingReady.delete(dir);
    this.lastReadyEvent.delete(dir);
    this.closeWhenIdle();
  }

  /** The job has ended or was stopped: no more watching. The watcher ends with its last job. */
  forget(dirOrPrefix: string): void {
    const covers = (dir: string) => dir === dirOrPrefix || dir.startsWith(`${dirOrPrefix}/`);
    for (const dir of [...this.watched.keys()]) {
      if (!covers(dir)) continue;
      this.watched.delete(dir);
      this.lastEvent.delete(dir);
      this.channel?.write(`unwatch 0 ${dir}\n`);
    }
    for (const dir of [...this.awaitingReady.keys()]) if (covers(dir)) this.forgetReadiness(dir);
    this.closeWhenIdle();
  }

  private closeWhenIdle(): void {
    if (this.watched.size === 0 && this.awaitingReady.size === 0) this.close();
  }

  close(): void {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = null;
    this.channel?.end();
  }

  private ensureStarted(): Promise<void> {
    if (this.channel) return Promise.resolve();
    if (this.starting) return this.starting;
    if (Date.now() - this.failedAt < RETRY_AFTER_MS) return Promise.resolve();
    this.starting = this.start()
      .catch(() => {
        this.failedAt = Date.now();
      })
      .finally(() => {
        this.starting = null;
      });
    return this.starting;
  }

  private async start(): Promise<void> {
    const session = await this.session();
    const channel = await session.openLongLived(`exec bash --noprofile --norc -c ${quoteShellWord(watcherScript(this.watchersDir))}`, this.startTimeoutMs);
    // A connection lost (keepalive unanswered) may not close its channels at once: the jobs are
    // checked on the host (and found unreachable) from that moment.
    session.onLost(() => {
      if (this.channel === channel) this.channel = null;
      channel.close();
    });
    channel.stderr.on('data', () => undefined);
    await new Promise<void>((resolve, reject) => {
      let pending = '';
      let ready = false;
      const timer = setTimeout(() => {
        channel.close();
        reject(new Error('the job watcher did not start'));
      }, this.startTimeoutMs);
      channel.on('data', (chunk: Buffer) => {
        pending += chunk.toString('utf8');
        const lines = pending.split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) {
          if (!ready) {
            // What the rc files print comes before the mark.
            if (line.endsWith(READY_MARK)) {
              ready = true;
              clearTimeout(timer);
              resolve();
            }
            continue;
          }
          this.take(line);
        }
      });
      channel.once('close', () => {
        clearTimeout(timer);
        if (this.channel === channel) this.channel = null;
        reject(new Error('the job watcher ended'));
      });
    });
    this.epoch += 1;
    this.seq += 1;
    this.listeningFrom = this.seq;
    this.channel = channel;
    this.sweeper ??= setInterval(() => this.sweep(), FORGET_AFTER_MS / 2);
    this.sweeper.unref();
  }

  /** `exit <dir>` or `gone <dir>`: the job is to be checked on the host again; `ready <dir>`: its readiness. */
  private take(line: string): void {
    const space = line.indexOf(' ');
    const verb = line.slice(0, space);
    const dir = line.slice(space + 1);
    // Every job of this user on the host reports to every watcher: keep only what concerns ours.
    if (!this.watched.has(dir) && !this.awaitingReady.has(dir) && !this.checking.has(dir)) return;
    if (verb === 'exit' || verb === 'gone') {
      this.seq += 1;
      this.lastEvent.set(dir, this.seq);
    } else if (verb === 'ready') {
      this.seq += 1;
      this.lastReadyEvent.set(dir, this.seq);
    }
  }

  private sweep(): void {
    const now = Date.now();
    for (const [dir, entry] of this.watched) if (now - entry.lastAsked > FORGET_AFTER_MS) this.forget(dir);
    for (const [dir, entry] of this.awaitingReady) if (now - entry.lastAsked > FORGET_AFTER_MS) this.forgetReadiness(dir);
  }
}
