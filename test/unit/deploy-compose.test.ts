import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { projectRoot } from '../../src/devserver/dev-server';

/**
 * docker-compose.yml through the compose tool's own check, `config`, which needs no Docker engine.
 * Debian's `docker-compose` package (scripts/setup.sh --test installs it) provides the tool; a
 * `docker compose` plugin, where present, serves as well.
 */

/** The compose command available here, or null. */
function composeCommand(): string[] | null {
  for (const candidate of [['docker-compose'], ['docker', 'compose']]) {
    const [bin = '', ...rest] = candidate;
    const r = spawnSync(bin, [...rest, 'version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    if (r.status === 0) return candidate;
  }
  return null;
}

const compose = composeCommand();
const scratch = mkdtempSync(join(tmpdir(), 'troupe-compose-test-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Runs `compose -f FILE config ARGS` with the host-port overrides unset, as a fresh shell has them. */
function composeConfig(file: string, args: string[]) {
  const [bin = '', ...rest] = compose ?? [];
  const env = { ...process.env };
  for (const key of Object.keys(env)) if (key.startsWith('TROUPE_')) delete env[key];
  return spawnSync(bin, [...rest, '--project-directory', projectRoot, '-f', file, 'config', ...args], {
    cwd: projectRoot,
    encoding: 'utf8',
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

if (compose === null) {
  console.warn('deploy-compose: no docker-compose here; install Debian\'s docker-compose (scripts/setup.sh --test does)');
}

describe.skipIf(compose === null)(`docker-compose.yml checked by ${compose?.join(' ') ?? 'docker-compose (not installed: skipped)'}`, () => {
  const file = join(projectRoot, 'docker-compose.yml');

  it('is valid for the compose tool', () => {
    const r = composeConfig(file, ['-q']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  it('publishes every port on 127.0.0.1 once variables are resolved', () => {
    const r = composeConfig(file, []);
    expect(r.status, r.stderr).toBe(0);
    const resolved = parse(r.stdout) as { services: Record<string, { ports?: unknown[] }> };
    const ports = Object.values(resolved.services).flatMap((s) => s.ports ?? []);
    expect(ports.length).toBeGreaterThanOrEqual(2);
    for (const port of ports) {
      // v1 prints `127.0.0.1:7233:7233/tcp`; v2 prints `{ host_ip: 127.0.0.1, published: "7233", … }`.
      const hostIp = typeof port === 'string' ? port.split(':')[0] : (port as { host_ip?: string }).host_ip;
      expect(hostIp, JSON.stringify(port)).toBe('127.0.0.1');
    }
  });

  it('rejects a broken copy (so the check above can fail)', () => {
    const broken = readFileSync(file, 'utf8').replace('condition: service_completed_successfully', 'condition: service_done');
    expect(broken).not.toBe(readFileSync(file, 'utf8'));
    const copy = join(scratch, 'docker-compose.yml');
    writeFileSync(copy, broken);
    const r = composeConfig(copy, ['-q']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/service_done|condition/);
  });

  it('rejects a service that depends on a service that does not exist', () => {
    const broken = readFileSync(file, 'utf8').replace(/( {6})temporal-setup:\n( {8}condition: service_completed_successfully)/, '$1temporal-setp:\n$2');
    expect(broken).toContain('temporal-setp:');
    const copy = join(scratch, 'docker-compose-missing.yml');
    writeFileSync(copy, broken);
    const r = composeConfig(copy, ['-q']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/temporal-setp/);
  });
});
