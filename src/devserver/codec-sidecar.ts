import { spawn } from 'node:child_process';
import { mkdirSync, openSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadCodecKeyring } from '../codec/codec-keys';
import { loadCodecToken } from '../codec/codec-token';
import { pidAlive, portIsOpen, projectRoot, recordedPid, stopRecordedProcess, type DevServerOptions } from './dev-server';

/**
 * The embedded default's codec server: `troupe codec-server` beside the dev server, on the port of
 * the Web UI's codec endpoint, answering the UI's origins, so the UI shows decoded inputs, results
 * and queries from the first run. Detached like the dev server (pid and log in its state dir),
 * stopped with it. A codec server already listening on that port (one the user started) is used.
 */

function pidFile(opts: DevServerOptions): string {
  return join(opts.stateDir, 'codec-server.pid');
}

/** The loopback port of the UI's codec endpoint, or null when the endpoint is elsewhere (then it is the user's to run). */
export function sidecarPort(opts: DevServerOptions): number | null {
  if (!opts.codecEndpoint) return null;
  const match = /^http:\/\/(?:127\.0\.0\.1|localhost):(\d+)$/.exec(opts.codecEndpoint);
  return match ? Number(match[1]) : null;
}


/** Starts the codec server for the dev server's UI unless one answers already; resolves once it listens. */
export async function startCodecSidecar(opts: DevServerOptions, timeoutMs = 30_000): Promise<{ endpoint: string; pid: number | null } | null> {
  const port = sidecarPort(opts);
  if (port === null || !opts.codecEndpoint) return null;
  const endpoint = opts.codecEndpoint;
  const existing = recordedPid(pidFile(opts));
  if (existing !== null || (await portIsOpen(port))) return { endpoint, pid: existing };
  // The workers and clients make these on first use too; the codec server never makes a key itself.
  loadCodecKeyring({ create: true });
  loadCodecToken({ create: true });
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  const log = openSync(join(opts.stateDir, 'codec-server.log'), 'a', 0o600);
  const origins = [`http://127.0.0.1:${opts.uiPort}`, `http://localhost:${opts.uiPort}`].flatMap((o) => ['--cors-origin', o]);
  // The dev server's Web UI has no setting that makes it send credentials: its origins are trusted
  // (the embedded default trusts this machine's local processes; see the README's Security section).
  const child = spawn(process.execPath, [join(projectRoot, 'bin', 'troupe.js'), 'codec-server', '--port', String(port), '--trust-origin', ...origins], {
    cwd: projectRoot,
    detached: true,
    stdio: ['ignore', log, log],
  });
  if (child.pid === undefined) throw new Error('could not start the codec server');
  child.unref();
  writeFileSync(pidFile(opts), `${child.pid}\n`);
  const deadline = Date.now() + timeoutMs;
  while (!(await portIsOpen(port))) {
    if (!pidAlive(child.pid)) throw new Error(`the codec server exited during start-up; see ${join(opts.stateDir, 'codec-server.log')}`);
    if (Date.now() > deadline) throw new Error(`the codec server did not listen on 127.0.0.1:${port} within ${timeoutMs / 1000}s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { endpoint, pid: child.pid };
}

/** Stops the codec server startCodecSidecar started (by its pid); false when none ran. */
export async function stopCodecSidecar(opts: DevServerOptions, timeoutMs = 10_000): Promise<boolean> {
  return await stopRecordedProcess(pidFile(opts), timeoutMs);
}
