import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultDevServerOptions, portHolder, projectRoot, startDevServer, stopDevServer } from '../../src/devserver/dev-server';
import { temporalAddress } from '../helpers/temporal';

/**
 * A dev server asked for on a port that is already held: a Temporal service there is used as it is
 * (a second `npm run demo` while another checkout's server runs); anything else is named in one
 * line with how to free the port.
 */

const stateDir = mkdtempSync(join(tmpdir(), 'troupe-dev-port-'));
let holder: ChildProcess;
let heldPort = 0;
beforeAll(async () => {
  holder = spawn(process.execPath, ['-e', "const s=require('net').createServer(()=>{}).listen(0,'127.0.0.1',()=>console.log(s.address().port))"], { stdio: ['ignore', 'pipe', 'inherit'] });
  heldPort = await new Promise<number>((resolve) => holder.stdout?.once('data', (d: Buffer) => resolve(Number(d.toString().trim()))));
});
afterAll(() => {
  holder.kill('SIGKILL');
  rmSync(stateDir, { recursive: true, force: true });
});

describe('a dev server on a port already held', () => {
  it('names the process that holds it and how to free it, in one line', async () => {
    expect(portHolder(heldPort)?.pid).toBe(holder.pid);
    const opts = defaultDevServerOptions({ stateDir, port: heldPort, dbFile: null });
    await expect(startDevServer(opts)).rejects.toThrow(
      new RegExp(`^port ${heldPort} on 127\\.0\\.0\\.1 is held by pid ${holder.pid} \\(.*node.*\\), which is not a Temporal service: stop it \\(\`kill ${holder.pid}\`\\), or use another port \\(TROUPE_DEV_SERVER_PORT\\)$`),
    );
  });

  it('`npm run dev-server -- start` says it in one line, exit 1, no stack trace', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/dev-server.ts', 'start'], {
      cwd: projectRoot,
      env: { ...process.env, TROUPE_DEV_SERVER_PORT: String(heldPort) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise((r) => child.once('exit', r));
    expect(code).toBe(1);
    expect(stderr.trimEnd().split('\n')).toEqual([expect.stringMatching(new RegExp(`^port ${heldPort} on 127\\.0\\.0\\.1 is held by pid ${holder.pid} `))]);
  }, 60_000);

  it('a Temporal service already there is used as it is, and left running by stopDevServer', async () => {
    const port = Number(temporalAddress().split(':').at(-1));
    const opts = defaultDevServerOptions({ stateDir, port, dbFile: null });
    const handle = await startDevServer(opts);
    expect(handle).toMatchObject({ reused: true, address: `127.0.0.1:${port}`, pid: portHolder(port)?.pid });
    expect(await stopDevServer(opts)).toBe(false);
    expect(portHolder(port)?.pid).toBe(handle.pid);
  }, 60_000);
});
