// The local fleet's process starter: a small Node process that starts processes on the worker's
// behalf (src/backends/local/spawner.ts says why). Plain JavaScript, so it starts in tens of ms
// without the TypeScript loader. It reads requests from its parent over the IPC channel and
// exits when the channel closes: when the worker ends, however it ends.
//
//   { id, kind: 'run', command, args }                 → { id, code, stdout, stderr }
//   { id, kind: 'spawn', command, args, cwd, env, log } → { id, pid } then { id, exited }
//                                                       (or { id, error } if it could not start)
//   { id, kind: 'watch', pid, starttime }              → { id, ended: true } once that process is gone
//                                                       (or { id, unwatched } if it cannot be watched)
//   { id, kind: 'unwatch' }                            → nothing more about watch `id`
//
// A watched process that this helper started is its child: its end comes with the child's exit
// (SIGCHLD), at no cost. Any other (started by a helper before this one, whose worker died) is
// watched by pidfd-watch.pl, a pidfd per process: an end wakes it, nothing is polled.
import { execFile, spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const send = (message) => {
  if (process.connected) process.send(message);
};

function run({ id, command, args }) {
  const child = execFile(command, args, { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
    const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
    send({ id, code, stdout, stderr: err && typeof err.code !== 'number' && !stderr ? String(err.message) : stderr });
  });
  child.stdin?.end();
}

/** Detached, in its own session, output appended to `log`: it outlives this helper and the worker. */
function start({ id, command, args, cwd, env, log }) {
  let out;
  try {
    out = openSync(log, 'a');
  } catch (err) {
    send({ id, error: String(err?.message ?? err) });
    return;
  }
  try {
    const child = spawn(command, args, { cwd, env, detached: true, stdio: ['ignore', out, out] });
    if (child.pid !== undefined) children.set(child.pid, []);
    child.once('error', (err) => send({ id, error: String(err.message) }));
    child.once('spawn', () => send({ id, pid: child.pid }));
    child.once('exit', (code, signal) => {
      send({ id, exited: code ?? (signal ? 128 : -1) });
      const waiting = children.get(child.pid) ?? [];
      children.delete(child.pid);
      for (const watchId of waiting) ended(watchId);
    });
    child.unref();
  } finally {
    closeSync(out);
  }
}

/** Live children by pid, with the watches waiting for their end (a pid is not reused before its exit is reaped). */
const children = new Map();
/** Watches by id: the child pid they wait on, or null when pidfd-watch.pl has them. */
const watches = new Map();

function ended(watchId) {
  if (watches.delete(watchId)) send({ id: watchId, ended: true });
}

function unwatched(watchId, reason) {
  if (watches.delete(watchId)) send({ id: watchId, unwatched: reason });
}

let pidfdWatcher = null;

/** pidfd-watch.pl, started on first use; null when it cannot run here (no perl). */
function pidfds() {
  if (pidfdWatcher) return pidfdWatcher;
  let child;
  try {
    child = spawn('perl', [fileURLToPath(new URL('./pidfd-watch.pl', import.meta.url))], { stdio: ['pipe', 'pipe', 'inherit'] });
  } catch {
    return null;
  }
  pidfdWatcher = child;
  let pending = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk) => {
    pending += chunk;
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      const [verb, key, ...reason] = line.split(' ');
      if (verb === 'ended') ended(Number(key));
      else if (verb === 'unwatched') unwatched(Number(key), reason.join(' '));
    }
  });
  child.stdin.on('error', () => undefined);
  const gone = () => {
    if (pidfdWatcher !== child) return;
    pidfdWatcher = null;
    for (const [watchId, pid] of watches) if (pid === null) unwatched(watchId, 'the pidfd watcher ended');
  };
  child.once('error', gone);
  child.once('exit', gone);
  return child;
}

function watch({ id, pid, starttime }) {
  const waiting = children.get(pid);
  if (waiting) {
    watches.set(id, pid);
    waiting.push(id);
    return;
  }
  watches.set(id, null);
  const watcher = pidfds();
  if (!watcher) unwatched(id, 'perl cannot run here');
  else watcher.stdin.write(`watch ${id} ${pid} ${starttime}\n`);
}

function unwatch({ id }) {
  if (!watches.has(id)) return;
  const pid = watches.get(id);
  watches.delete(id);
  const waiting = pid === null ? undefined : children.get(pid);
  if (waiting) waiting.splice(waiting.indexOf(id) >>> 0, 1);
  else if (pid === null) pidfdWatcher?.stdin.write(`unwatch ${id}\n`);
}

process.on('message', (request) => {
  if (request?.kind === 'run') run(request);
  else if (request?.kind === 'spawn') start(request);
  else if (request?.kind === 'watch') watch(request);
  else if (request?.kind === 'unwatch') unwatch(request);
});
process.on('disconnect', () => process.exit(0));
send({ ready: true });
