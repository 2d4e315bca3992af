import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultDevServerOptions, startDevServer, stopDevServer, type DevServerOptions } from '../../src/devserver/dev-server';
import { freePort } from '../helpers/free-port';
import { statNow } from '../helpers/live-dir';

/** The embedded dev server's database (every run's history) and log are the owner's alone. */

const scratch = mkdtempSync(join(tmpdir(), 'troupe-dev-server-files-'));
let opts: DevServerOptions | undefined;
afterAll(async () => {
  if (opts) await stopDevServer(opts);
  rmSync(scratch, { recursive: true, force: true });
});

describe('the dev server state folder', () => {
  it('is 0700, and the database and log files have no group or other bits', async () => {
    const stateDir = join(scratch, 'server');
    opts = defaultDevServerOptions({ stateDir, port: await freePort(), uiPort: await freePort(), dbFile: join(stateDir, 'temporal.db'), codecEndpoint: null });
    await startDevServer(opts);
    expect(statSync(stateDir).mode & 0o777).toBe(0o700);
    // SQLite's journal and WAL files come and go while the server runs: those gone by the stat are skipped.
    const files = statNow(stateDir, (name) => name.startsWith('temporal'));
    expect(files.map((f) => f.name)).toEqual(expect.arrayContaining(['temporal.db', 'temporal.log']));
    for (const { name, stat } of files) expect({ name, mode: (stat.mode & 0o077).toString(8) }).toEqual({ name, mode: '0' });
  });
});
