import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { fileLimit, raiseFileLimit } from '../../src/worker/file-limit';

describe('raiseFileLimit', () => {
  it('raises a lowered soft limit on open files to the hard limit', async () => {
    const before = await fileLimit();
    const lowered = Math.min(256, before.hard ?? 256);
    execFileSync('prlimit', ['--pid', String(process.pid), `--nofile=${lowered}:`]);
    expect((await fileLimit()).soft).toBe(lowered);
    const after = await raiseFileLimit();
    expect(after.soft).toBe(before.hard);
    expect(after.hard).toBe(before.hard);
  });
});
