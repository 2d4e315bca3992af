import { spawnSync } from 'node:child_process';
import { mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { removeOrphanedTemps, writeFileAtomicSync } from '../../src/backends/local/state-files';
import { PREPARED_FILE, readPrepared, recordPrepared, type PreparedNode } from '../../src/backends/local/node-preparation';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('temporary files of killed writers', () => {
  it('are removed when their writer is gone, and only then', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'troupe-state-'));
    dirs.push(dir);
    // A pid that surely ended: a process that has exited and been reaped.
    const deadPid = spawnSync('true').pid;
    const files = [
      `10.213.0.2.tmp-${deadPid}-c28733e4`,
      `10.213.0.3.tmp-${process.pid}-0011aabb`,
      `10.213.0.4.tmp-1-0011aabb`,
      '10.213.0.5',
      'notes.tmp-x',
    ];
    for (const name of files) writeFileSync(join(dir, name), '{}');
    await removeOrphanedTemps(dir);
    expect(readdirSync(dir).sort()).toEqual(files.slice(1).sort());
    await removeOrphanedTemps(join(dir, 'missing'));
  });
});

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-state-'));
  dirs.push(dir);
  return dir;
}

describe('writeFileAtomicSync', () => {
  it('replaces a file by rename, with its mode, leaving no temporary file', () => {
    const dir = scratch();
    const path = join(dir, 'job.env');
    writeFileSync(path, 'old');
    // A reader that opened the old file keeps reading it (a new inode took its name).
    const before = openSync(path, 'r');
    writeFileAtomicSync(path, 'new content', 0o640);
    expect(readFileSync(path, 'utf8')).toBe('new content');
    expect(readFileSync(before, 'utf8')).toBe('old');
    expect(statSync(path).mode & 0o777).toBe(0o640 & ~process.umask());
    expect(readdirSync(dir)).toEqual(['job.env']);
  });

  it('writes through no link: a link at the name is replaced, not followed', () => {
    const dir = scratch();
    const target = join(dir, 'elsewhere');
    writeFileSync(target, 'keep');
    symlinkSync(target, join(dir, 'hostfile'));
    writeFileAtomicSync(join(dir, 'hostfile'), 'mine');
    expect(readFileSync(target, 'utf8')).toBe('keep');
    expect(readFileSync(join(dir, 'hostfile'), 'utf8')).toBe('mine');
  });

  it("fails without a directory (the caller's set-up makes it)", () => {
    expect(() => writeFileAtomicSync(join(scratch(), 'missing', 'x'), 'x')).toThrow(/ENOENT/);
  });
});

describe('a node set up ahead of its start', () => {
  const isolated: PreparedNode = { user: { name: 'troupe-0123456789', uid: 990, gid: 990 }, cgroup_why: null, hide: ['/var/lib/troupe'] };
  const plain: PreparedNode = { user: null, cgroup_why: 'no cgroup v2 here', hide: null };

  it('reads back as recorded, root-only, for the same settings', () => {
    const dir = scratch();
    expect(readPrepared(dir, true)).toBeNull();
    recordPrepared(dir, isolated);
    expect(readPrepared(dir, true)).toEqual(isolated);
    expect(statSync(join(dir, PREPARED_FILE)).mode & 0o077).toBe(0);
    recordPrepared(dir, plain);
    expect(readPrepared(dir, false)).toEqual(plain);
  });

  it('is set up again when recorded for other settings, or unreadable', () => {
    const dir = scratch();
    recordPrepared(dir, plain);
    expect(readPrepared(dir, true)).toBeNull();
    recordPrepared(dir, isolated);
    expect(readPrepared(dir, false)).toBeNull();
    writeFileSync(join(dir, PREPARED_FILE), '{"user": null');
    expect(readPrepared(dir, false)).toBeNull();
    writeFileSync(join(dir, PREPARED_FILE), JSON.stringify({ user: null, cgroup_why: 3, hide: null }));
    expect(readPrepared(dir, false)).toBeNull();
  });

  it('is read from the job directory only (a gone directory reads as not set up)', () => {
    expect(readPrepared(join(scratch(), 'gone'), false)).toBeNull();
  });
});
