import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FolderWatch } from '../../src/backends/local/folder-watch';

describe('FolderWatch', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-folder-watch-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const timed = async (wait: Promise<void>) => {
    const t0 = Date.now();
    await wait;
    return Date.now() - t0;
  };

  it('looks again after maxMs while a folder is not there (nor its parent), and at once when it appears', async () => {
    const later = join(dir, 'deeper', 'later');
    const watch = new FolderWatch([dir, later]);
    try {
      expect(await timed(watch.changed(50))).toBeLessThan(600);
      await mkdir(later, { recursive: true });
      // Newly watched: returns at once, so what happened in it before is looked at.
      expect(await timed(watch.changed(5_000))).toBeLessThan(200);
    } finally {
      watch.close();
    }
  });

  it('a folder whose parent is watched is told by its creation: no look every maxMs meanwhile', async () => {
    const inner = join(dir, 'started');
    const watch = new FolderWatch([dir, inner]);
    try {
      const waiting = timed(watch.changed(20));
      setTimeout(() => void mkdir(inner), 300);
      const waited = await waiting;
      expect(waited).toBeGreaterThanOrEqual(250);
      expect(waited).toBeLessThan(900);
      // Now watched itself: the next call returns at once.
      expect(await timed(watch.changed(5_000))).toBeLessThan(200);
    } finally {
      watch.close();
    }
  });

  it('once every folder is watched, waits for a change (not maxMs), or a nudge', async () => {
    const watch = new FolderWatch([dir]);
    try {
      // No change: the wait outlasts maxMs (the long look), yet a change ends it at once.
      const waiting = timed(watch.changed(20));
      setTimeout(() => void writeFile(join(dir, 'pid'), '1'), 300);
      const waited = await waiting;
      expect(waited).toBeGreaterThanOrEqual(250);
      expect(waited).toBeLessThan(900);
      const nudged = timed(watch.changed(20));
      setTimeout(() => watch.nudge(), 100);
      expect(await nudged).toBeLessThan(900);
    } finally {
      watch.close();
    }
  });
});
