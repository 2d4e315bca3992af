import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

/** `troupe gateway` as a user starts it: the real bin script. */

const root = fileURLToPath(new URL('../..', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'troupe-gateway-cli-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const TOKEN = 'admin-token-0123456789abcdef';

describe('troupe gateway', () => {
  it('refuses a missing address or token as bad usage', () => {
    const env = { ...process.env, TROUPE_GATEWAY_ADMIN_TOKEN: '' };
    const noListen = spawnSync(process.execPath, ['bin/troupe.js', 'gateway', '--admin', '127.0.0.1:0'], { cwd: root, env, encoding: 'utf8' });
    expect(noListen.status).toBe(2);
    expect(noListen.stderr).toContain('needs --listen HOST:PORT');
    const noToken = spawnSync(process.execPath, ['bin/troupe.js', 'gateway', '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'], { cwd: root, env, encoding: 'utf8' });
    expect(noToken.status).toBe(2);
    expect(noToken.stderr).toContain('TROUPE_GATEWAY_ADMIN_TOKEN');
    for (const bad of ['gw.example.com', 'https://gw.example.com/api', 'ftp://gw.example.com']) {
      const refused = spawnSync(process.execPath, ['bin/troupe.js', 'gateway', '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--public-url', bad], {
        cwd: root,
        env: { ...env, TROUPE_GATEWAY_ADMIN_TOKEN: TOKEN },
        encoding: 'utf8',
      });
      expect(refused.status).toBe(2);
      expect(refused.stderr).toContain(`--public-url wants an http(s) origin with no path`);
      expect(refused.stderr).toContain(JSON.stringify(bad));
    }
  });

  it('refuses an SSH key it could not use, and --ssh-known-hosts without one, before it listens', () => {
    const gateway = (args: string[]) =>
      spawnSync(process.execPath, ['bin/troupe.js', 'gateway', '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', ...args], { cwd: root, env: { ...process.env, TROUPE_GATEWAY_ADMIN_TOKEN: TOKEN }, encoding: 'utf8' });
    const loose = join(scratch, 'loose_key');
    writeFileSync(loose, 'not a key', { mode: 0o644 });
    const cases: Array<[string[], string]> = [
      [['--ssh-known-hosts', join(scratch, 'known_hosts')], '--ssh-known-hosts checks the jump hosts of --ssh-identity FILE, and none is given'],
      [['--ssh-identity', join(scratch, 'absent_key')], `identity file ${join(scratch, 'absent_key')} for --ssh-identity cannot be read`],
      [['--ssh-identity', loose], `is readable by group or others (mode 0644): refusing to use it. Run: chmod 600 ${loose}`],
    ];
    for (const [args, message] of cases) {
      const refused = gateway(args);
      expect([refused.status, refused.stderr]).toEqual([2, expect.stringContaining(message)]);
    }
  });

  it('serves, answers its admin API with the token from the file, never prints the token, and stops on SIGTERM', async () => {
    const tokenFile = join(scratch, 'token');
    writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    const args = ['gateway', '--listen', '0.0.0.0:0', '--admin', '127.0.0.1:0', '--admin-token-file', tokenFile];
    const child = spawn(process.execPath, ['bin/troupe.js', ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    try {
      await expect.poll(() => out, { timeout: 30_000, interval: 100 }).toMatch(/admin API on (\S+);/);
      const adminUrl = /admin API on (\S+);/.exec(out)?.[1] as string;
      const dataUrl = /Gateway on (\S+),/.exec(out)?.[1] as string;
      // Listening on every interface, the gateway tells users the loopback, an address they can call.
      const port = new URL(dataUrl).port;
      const shown = `http://127.0.0.1:${port}`;
      expect(out).toContain(`shown to users as ${shown} `);
      const info = await fetch(`${adminUrl}/info`, { headers: { authorization: `Bearer ${TOKEN}` } });
      expect(await info.json()).toEqual({ data_plane_url: shown, domain: null });
      expect((await fetch(`${adminUrl}/services`)).status).toBe(401);
      expect(await (await fetch(`${adminUrl}/services`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()).toEqual({ services: [] });
      expect((await fetch(`${shown}/services/web/`)).status).toBe(404);
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
    expect(out).not.toContain(TOKEN);
  }, 60_000);
});
