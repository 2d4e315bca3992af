import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * Starts the local fleet's processes (`ip`, the node network's shell, job wrappers) from a small
 * helper process (spawn-helper.mjs) instead of from the worker itself.
 *
 * Why: forking the worker — hundreds of MB and dozens of threads — blocks its event loop for 4–6 ms
 * per process, and that loop carries every workflow task and activity of the worker. A launch of
 * the PD sample starts about ten processes; from the helper (a plain Node process of a few tens of
 * MB) each costs the worker one message. Measured in bench/launch-latency.ts (BENCHMARKS.md).
 *
 * The helper starts on first use, in the background: until it answers, and whenever it is gone,
 * processes are started directly, as before. It exits when the worker does (its IPC channel
 * closes). Jobs it starts are detached into their own sessions, so they never depend on it.
 */

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface DetachedOptions {
  cwd: string;
  env: Record<string, string>;
  /** Standard output and error are appended here. */
  log: string;
}

/** A detached process: `exited` resolves with its exit code when it ends (while this process watches). */
export interface Detached {
  exited: Promise<number | null>;
}

/**
 * A process's end, pushed by the helper (its child's exit, or a pidfd for any other process):
 * `ended` resolves with `ended` once the process is gone (at once when it is gone already), or with
 * `unwatched` when the helper cannot watch it (not up yet, gone, no perl, out of descriptors).
 */
export interface EndWatch {
  ended: Promise<'ended' | 'unwatched'>;
  /** Nothing more is wanted about it: the helper lets it go. */
  cancel(): void;
}

const HELPER = fileURLToPath(new URL('./spawn-helper.mjs', import.meta.url));

type Reply =
  | { id: number; code: number; stdout: string; stderr: string }
  | { id: number; pid: number }
  | { id: number; exited: number }
  | { id: number; error: string }
  | { id: number; ended: true }
  | { id: number; unwatched: string };

interface Pending {
  /** What a reply means for the request: answered, only its end is awaited (a detached process), or neither yet. */
  onReply(reply: Reply): 'done' | 'watching' | 'waiting';
  /** The helper went away before the request was done. */
  onLost(): void;
  /** Keeps this process alive: until the answer (a run) or the start (a detached process). */
  holding: boolean;
}

class SpawnHelper {
  private child: ChildProcess | null = null;
  private ready = false;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  /** Requests of `pending` that hold this process alive (counted: a thousand watched jobs would make a scan per message costly). */
  private holders = 0;
  /** Set when the helper cannot be started here: everything is started directly from then on. */
  private disabled = process.env.TROUPE_SPAWN_HELPER === '0';

  /** The helper when it is up; starts it (in the background) otherwise. */
  private helper(): ChildProcess | null {
    if (this.disabled) return null;
    if (this.child === null) this.launch();
    return this.ready ? this.child : null;
  }

  private launch(): void {
    let child: ChildProcess;
    try {
      // NODE_OPTIONS may load the TypeScript loader (tsx): the helper is plain JavaScript and needs none.
      child = spawn(process.execPath, [HELPER], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'], env: { ...process.env, NODE_OPTIONS: '' } });
    } catch {
      this.disabled = true;
      return;
    }
    this.child = child;
    child.on('message', (message: unknown) => {
      if (isReady(message)) {
        this.ready = true;
      } else {
        const reply = message as Reply;
        const pending = this.pending.get(reply.id);
        const state = pending?.onReply(reply);
        if (pending?.holding && state !== 'waiting') {
          pending.holding = false;
          this.holders -= 1;
        }
        if (state === 'done') this.pending.delete(reply.id);
      }
      this.holdWhileWaiting();
    });
    // Also emitted when a message cannot reach a helper that just died: only one that never came up disables it.
    child.on('error', () => {
      if (!this.ready && this.child === child) this.disabled = true;
      this.lost(child);
    });
    child.once('exit', () => {
      // One that never answered will not (a broken install): no new helper for every process.
      if (!this.ready && this.child === child) this.disabled = true;
      this.lost(child);
    });
    child.unref();
    this.holdWhileWaiting();
  }

  /** The helper exited: every request still open is lost; the next one starts a new helper. */
  private lost(child: ChildProcess): void {
    if (this.child !== child) return;
    this.child = null;
    this.ready = false;
    const lost = [...this.pending.values()];
    this.pending.clear();
    this.holders = 0;
    for (const p of lost) p.onLost();
  }

  /** The channel keeps this process alive only while a request waits for its answer. */
  private holdWhileWaiting(): void {
    const channel = this.child?.channel;
    if (!channel) return;
    if (this.holders > 0) channel.ref();
    else channel.unref();
  }

  private request(child: ChildProcess, body: Record<string, unknown>, pending: Omit<Pending, 'holding'>, holding = true): number {
    const id = this.nextId++;
    this.pending.set(id, { ...pending, holding });
    if (holding) this.holders += 1;
    this.holdWhileWaiting();
    this.post(child, { id, ...body });
    return id;
  }

  private post(child: ChildProcess, message: Record<string, unknown>): void {
    try {
      child.send(message);
    } catch {
      // The channel closed under us: the helper's exit follows, and with it onLost.
    }
  }

  /**
   * Watches the end of the process `pid` that started at `starttime` (field 22 of its stat). A
   * watch never keeps this process alive; while the helper is not up, it is `unwatched` at once.
   */
  watchEnd(pid: number, starttime: number): EndWatch {
    const child = this.helper();
    if (!child) return { ended: Promise.resolve('unwatched'), cancel: () => undefined };
    let id = 0;
    const ended = new Promise<'ended' | 'unwatched'>((resolve) => {
      id = this.request(
        child,
        { kind: 'watch', pid, starttime },
        {
          onReply: (reply) => {
            if ('ended' in reply) resolve('ended');
            else if ('unwatched' in reply) resolve('unwatched');
            else return 'waiting';
            return 'done';
          },
          onLost: () => resolve('unwatched'),
        },
        false,
      );
    });
    return {
      ended,
      cancel: () => {
        if (this.pending.delete(id) && this.child === child) this.post(child, { kind: 'unwatch', id });
      },
    };
  }

  /** Runs a command to its end, standard input closed, and returns its exit code and output. */
  run(command: string, args: readonly string[]): Promise<CommandResult> {
    const child = this.helper();
    if (!child) return runDirectly(command, args);
    return new Promise((resolve) => {
      this.request(child, { kind: 'run', command, args }, {
        onReply: (reply) => {
          if (!('code' in reply)) return 'waiting';
          resolve({ code: reply.code, stdout: reply.stdout, stderr: reply.stderr });
          return 'done';
        },
        // Lost before its answer: run again here. The callers' commands are idempotent or checked.
        onLost: () => void runDirectly(command, args).then(resolve),
      });
    });
  }

  /** Starts a detached process (its own session) whose output goes to `opts.log`. */
  startDetached(command: string, args: readonly string[], opts: DetachedOptions): Detached {
    const child = this.helper();
    if (!child) return startDirectly(command, args, opts);
    let started = false;
    const exited = new Promise<number | null>((resolve) => {
      this.request(child, { kind: 'spawn', command, args, cwd: opts.cwd, env: opts.env, log: opts.log }, {
        onReply: (reply) => {
          if ('pid' in reply) {
            started = true;
            return 'watching';
          }
          if ('exited' in reply) resolve(reply.exited);
          else if ('error' in reply) resolve(-1);
          else return 'waiting';
          return 'done';
        },
        // Lost before it started: started here (a second start of a job loses its claim and ends).
        // Lost while it runs: its end is no longer watched; the job's files still tell it.
        onLost: () => {
          if (!started) void startDirectly(command, args, opts).exited.then(resolve);
        },
      });
    });
    return { exited };
  }
}

function isReady(message: unknown): boolean {
  return typeof message === 'object' && message !== null && (message as { ready?: unknown }).ready === true;
}

function runDirectly(command: string, args: readonly string[]): Promise<CommandResult> {
  return new Promise((resolve) => {
    const child = execFile(command, args, { encoding: 'utf8' }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
    child.stdin?.end();
  });
}

function startDirectly(command: string, args: readonly string[], opts: DetachedOptions): Detached {
  const out = openSync(opts.log, 'a');
  try {
    const child = spawn(command, args, { cwd: opts.cwd, detached: true, stdio: ['ignore', out, out], env: opts.env });
    const exited = new Promise<number | null>((resolve) => {
      child.once('error', () => resolve(-1));
      child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 : -1)));
    });
    child.unref();
    return { exited };
  } finally {
    closeSync(out);
  }
}

/** One helper per worker process. */
export const spawner = new SpawnHelper();
