import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/** `troupe worker`'s local fleet size flags and variables: refused before connecting, in one line. */

const root = fileURLToPath(new URL('../..', import.meta.url));

function worker(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, ['bin/troupe.js', 'worker', ...args, '--address', '127.0.0.1:1'], {
    cwd: root,
    env: { ...process.env, NO_COLOR: '1', ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, stderr: r.stderr.trimEnd() };
}

describe('troupe worker --local-subnet / --local-capacity', () => {
  it('refuses a capacity that is not a whole number, from the flag', () => {
    expect(worker(['--local-capacity', 'many'])).toEqual({ code: 2, stderr: '--local-capacity / TROUPE_LOCAL_CAPACITY must be a whole number ≥ 0 (got "many")' });
  });

  it('refuses a subnet that is not one, from the flag or TROUPE_LOCAL_SUBNET', () => {
    expect(worker(['--local-subnet', '127.214.0.1/20'])).toEqual({ code: 2, stderr: '--local-subnet / TROUPE_LOCAL_SUBNET: subnet "127.214.0.1/20" has host bits set' });
    expect(worker([], { TROUPE_LOCAL_SUBNET: 'everything' })).toEqual({ code: 2, stderr: '--local-subnet / TROUPE_LOCAL_SUBNET: subnet "everything" is not of the form a.b.c.d/prefix' });
  });

  it('takes valid ones, then goes on to connect', () => {
    const r = worker(['--local-subnet', '127.214.0.0/20', '--local-capacity', '4000']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^cannot reach the Temporal service at 127\.0\.0\.1:1: connection refused/);
  });
});
