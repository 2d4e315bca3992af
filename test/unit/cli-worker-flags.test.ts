import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

/** `troupe worker`'s local fleet size flags and variables: refused before connecting, in one line. */

const root = fileURLToPath(new URL('../..', import.meta.url));

function worker(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, ['bin/troupe.js', 'worker', ...args, '--address', '127.0.0.1:1'], {
    cwd: root,
    env: { ...process.env, NO_COLOR: '1', TROUPE_GATEWAYS: '', TROUPE_GATEWAY_ADMIN_TOKEN: '', ...env },
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

describe('troupe worker --gateway / --gateway-token-file', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'troupe-worker-flags-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));
  const TOKEN = 'gateway-admin-token-0123456789';
  const tokenFile = join(scratch, 'token');
  writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });

  it('refuses an admin URL that is not one, from the flag or TROUPE_GATEWAYS', () => {
    expect(worker(['--gateway', '127.0.0.1:8081', '--gateway-token-file', tokenFile])).toEqual({
      code: 2,
      stderr: '--gateway / TROUPE_GATEWAYS wants a gateway\'s admin URL such as http://127.0.0.1:8081, not "127.0.0.1:8081"',
    });
    expect(worker([], { TROUPE_GATEWAYS: 'http://127.0.0.1:8081,http://gw:8081/admin', TROUPE_GATEWAY_ADMIN_TOKEN: TOKEN }).stderr).toBe(
      '--gateway / TROUPE_GATEWAYS wants a gateway\'s admin URL such as http://127.0.0.1:8081, not "http://gw:8081/admin"',
    );
  });

  it('wants a token of 16 characters or more for its gateways, and a token file only with a gateway', () => {
    expect(worker(['--gateway', 'http://127.0.0.1:8081'])).toEqual({ code: 2, stderr: "the gateway's admin API needs a token: --gateway-token-file FILE or env TROUPE_GATEWAY_ADMIN_TOKEN" });
    expect(worker(['--gateway', 'http://127.0.0.1:8081', '--gateway-token-file', join(scratch, 'none')]).stderr).toMatch(/^cannot read --gateway-token-file .*none: ENOENT/);
    expect(worker(['--gateway', 'http://127.0.0.1:8081'], { TROUPE_GATEWAY_ADMIN_TOKEN: 'short' })).toEqual({ code: 2, stderr: 'the admin token (TROUPE_GATEWAY_ADMIN_TOKEN) must be at least 16 characters' });
    expect(worker(['--gateway-token-file', tokenFile])).toEqual({ code: 2, stderr: '--gateway-token-file is for the gateways of --gateway ADMIN_URL (or env TROUPE_GATEWAYS), and none is given' });
  });

  it('takes valid ones, then goes on to connect, never printing the token', () => {
    const r = worker(['--gateway', 'http://127.0.0.1:8081', '--gateway', 'http://[::1]:8082/', '--gateway-token-file', tokenFile]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^cannot reach the Temporal service at 127\.0\.0\.1:1: connection refused/);
    expect(r.stderr).not.toContain(TOKEN);
  });
});
