// The local fleet's process starter: a small Node process that starts processes on the worker's
// behalf (src/backends/local/spawner.ts says why). Plain JavaScript, so it starts in tens of ms
// without the TypeScript loader. It reads requests from its parent over the IPC channel and
// exits when the channel closes: when the worker ends, however it ends.
//
//   { id, kind: 'run', command, args }                 → { id, code, stdout, stderr }
//   { id, kind: 'spawn', command, args, cwd, env, log } → { id, pid } then { id, exited }
//                                                       (or { id, error } if it could not start)
import { execFile, spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';

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
    child.once('error', (err) => send({ id, error: String(err.message) }));
    child.once('spawn', () => send({ id, pid: child.pid }));
    child.once('exit', (code, signal) => send({ id, exited: code ?? (signal ? 128 : -1) }));
    child.unref();
  } finally {
    closeSync(out);
  }
}

process.on('message', (request) => {
  if (request?.kind === 'run') run(request);
  else if (request?.kind === 'spawn') start(request);
});
process.on('disconnect', () => process.exit(0));
send({ ready: true });
