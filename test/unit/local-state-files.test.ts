import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { removeOrphanedTemps } from '../../src/backends/local/state-files';

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
