import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { writePeersFile } from '../../src/backends/local/peers-file';
import { JobLayout as L } from '../../src/runner/job-layout';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function jobDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-peers-'));
  dirs.push(dir);
  return dir;
}

const book = (version: number) => ({ version, json: JSON.stringify({ version, nodes: [`10.213.0.${version}`] }) });
const LOCK = '.peers.lock';

describe("a local job's peers.json", () => {
  it('is replaced by a newer book, never by an older one, with its mode; no lock or temporary file stays', async () => {
    const dir = jobDir();
    expect(await writePeersFile(dir, book(2), 0o640, null)).toBe(true);
    expect(await writePeersFile(dir, book(1), 0o640, null)).toBe(false);
    expect(JSON.parse(readFileSync(join(dir, L.peers), 'utf8'))).toMatchObject({ version: 2 });
    expect(await writePeersFile(dir, book(3), 0o640, null)).toBe(true);
    expect(JSON.parse(readFileSync(join(dir, L.peers), 'utf8'))).toMatchObject({ version: 3 });
    expect(statSync(join(dir, L.peers)).mode & 0o777).toBe(0o640 & ~process.umask());
    expect(readdirSync(dir)).toEqual([L.peers]);
  });

  it("takes over the lock of a writer that died, and waits for a live one's", async () => {
    const dir = jobDir();
    const deadPid = spawnSync('true').pid;
    writeFileSync(join(dir, LOCK), `${deadPid}\n`);
    expect(await writePeersFile(dir, book(1), 0o644, null)).toBe(true);
    // A live holder (this process): the write waits until the lock is gone.
    writeFileSync(join(dir, LOCK), `${process.pid}\n`);
    let done = false;
    const write = writePeersFile(dir, book(2), 0o644, null).then((r) => ((done = true), r));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(done).toBe(false);
    unlinkSync(join(dir, LOCK));
    expect(await write).toBe(true);
    expect(JSON.parse(readFileSync(join(dir, L.peers), 'utf8'))).toMatchObject({ version: 2 });
    expect(existsSync(join(dir, LOCK))).toBe(false);
  });

  it('runs what follows the book under the lock, only when the book was written', async () => {
    const dir = jobDir();
    const seen: boolean[] = [];
    const alongside = async () => void seen.push(existsSync(join(dir, LOCK)));
    await writePeersFile(dir, book(2), 0o644, null, alongside);
    await writePeersFile(dir, book(1), 0o644, null, alongside);
    expect(seen).toEqual([true]);
  });
});
