import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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

/** Runs `compose -f FILE config ARGS` with the host-port overrides unset, as a fresh shell has them, plus `set`. */
function composeConfig(file: string, args: string[], set: Record<string, string> = {}) {
  const [bin = '', ...rest] = compose ?? [];
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of Object.keys(env)) if (key.startsWith('TROUPE_')) delete env[key];
  Object.assign(env, set);
  return spawnSync(bin, [...rest, '--project-directory', projectRoot, '-f', file, 'config', ...args], {
    cwd: projectRoot,
    encoding: 'utf8',
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

const promtool = spawnSync('promtool', ['--version'], { stdio: 'ignore' }).status === 0 ? 'promtool' : null;

/**
 * `promtool check config` of the Prometheus config (Debian's `prometheus` package, scripts/setup.sh
 * --test) with the compose secret's path pointed at a file here: promtool insists the file exists.
 */
function promtoolCheck(text: string) {
  const token = join(scratch, 'gateway-admin.token');
  writeFileSync(token, 'x'.repeat(32), { mode: 0o600 });
  const config = join(scratch, 'prometheus.yml');
  writeFileSync(config, text.replaceAll('/run/secrets/gateway-admin-token', token));
  return spawnSync('promtool', ['check', 'config', config], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

describe.skipIf(promtool === null)('deploy/prometheus/prometheus.yml checked by promtool', () => {
  const text = readFileSync(join(projectRoot, 'deploy', 'prometheus', 'prometheus.yml'), 'utf8');

  it('is a valid config (the gateways scraped with the token file)', () => {
    const r = promtoolCheck(text);
    expect(r.status, r.stdout + r.stderr).toBe(0);
  });

  it('rejects a broken copy (so the check above can fail)', () => {
    const r = promtoolCheck(text.replace('type: Bearer', 'type: Bearer\n      credentials: inline'));
    expect(r.status).not.toBe(0);
    expect(r.stdout + r.stderr).toMatch(/credentials/);
  });
});

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

  interface Resolved {
    services: Record<string, { command?: string[]; ports?: unknown[]; secrets?: Array<{ source: string }>; volumes?: unknown[] }>;
    secrets?: Record<string, { file?: string }>;
  }
  const resolved = (set: Record<string, string> = {}): Resolved => {
    const r = composeConfig(file, [], set);
    expect(r.status, r.stderr).toBe(0);
    return parse(r.stdout) as Resolved;
  };
  /** The host port a service publishes for container port `target` (v1: `127.0.0.1:8090:8080/tcp`; v2: an object). */
  const published = (ports: unknown[] | undefined, target: number) =>
    (ports ?? []).flatMap((p) => {
      if (typeof p === 'string') return p.split('/')[0]?.endsWith(`:${target}`) ? [p.split(':')[1]] : [];
      const o = p as { target?: number; published?: string | number };
      return o.target === target ? [String(o.published)] : [];
    });

  it('serves two gateways, each on its own host port, whose token comes from a file git ignores', () => {
    const config = resolved();
    const gateways = ['gateway-a', 'gateway-b'].map((name) => config.services[name]);
    const ports = gateways.map((gw) => published(gw?.ports, 8080));
    expect(ports).toEqual([['8090'], ['8091']]);
    for (const gw of gateways) {
      expect(gw?.secrets?.map((s) => s.source)).toEqual(['gateway-admin-token']);
      expect(gw?.command?.join(' ')).toMatch(/--state \/var\/lib\/troupe\/gateway\.json --admin-token-file \/run\/secrets\/gateway-admin-token/);
    }
    expect(config.secrets?.['gateway-admin-token']?.file).toBe(join(projectRoot, '.troupe', 'gateway-admin.token'));
    expect(readFileSync(join(projectRoot, '.gitignore'), 'utf8').split('\n')).toContain('.troupe/');
    const worker = config.services.worker?.command?.join(' ') ?? '';
    expect(worker).toContain('--gateway http://gateway-a:8081 --gateway http://gateway-b:8081 --gateway-token-file /run/secrets/gateway-admin-token');
  });

  it("moves the gateways' ports, public URL and token file by variables", () => {
    const config = resolved({
      TROUPE_GATEWAY_A_PORT: '9180',
      TROUPE_GATEWAY_B_PORT: '9181',
      TROUPE_GATEWAY_PUBLIC_URL: 'https://gw.example.com',
      TROUPE_GATEWAY_ADMIN_TOKEN_FILE: '/etc/troupe/gateway.token',
    });
    expect(published(config.services['gateway-a']?.ports, 8080)).toEqual(['9180']);
    expect(published(config.services['gateway-b']?.ports, 8080)).toEqual(['9181']);
    for (const name of ['gateway-a', 'gateway-b']) expect(config.services[name]?.command?.join(' ')).toContain('--public-url https://gw.example.com');
    expect(config.secrets?.['gateway-admin-token']?.file).toBe('/etc/troupe/gateway.token');
  });

  /** Services that reach the frontend (the server, and whoever's TEMPORAL_ADDRESS names it) without the certificates mounted read-only, as compose resolves them. */
  const withoutCertificates = (config: { services: Record<string, { environment?: Record<string, string | null>; volumes?: unknown[] }> }) =>
    Object.entries(config.services)
      .filter(([name, svc]) => name === 'temporal' || svc.environment?.TEMPORAL_ADDRESS === 'temporal:7233')
      .filter(([, svc]) =>
        !(svc.volumes ?? []).some((v) => {
          // v1 prints `troupe-tls:/etc/troupe/tls:ro`; v2 prints `{ type: volume, source: troupe-tls, target: …, read_only: true }`.
          if (typeof v === 'string') return /^\S*troupe-tls:\/etc\/troupe\/tls:ro$/.test(v);
          const o = v as { source?: string; target?: string; read_only?: boolean };
          return /troupe-tls$/.test(o.source ?? '') && o.target === '/etc/troupe/tls' && o.read_only === true;
        }),
      )
      .map(([name]) => name);

  it('mounts the certificates read-only in every service that reaches the frontend', () => {
    const r = composeConfig(file, []);
    expect(r.status, r.stderr).toBe(0);
    const config = parse(r.stdout) as Parameters<typeof withoutCertificates>[0];
    expect(Object.keys(config.services).filter((n) => config.services[n]?.environment?.TEMPORAL_ADDRESS === 'temporal:7233').sort()).toEqual(['temporal-setup', 'temporal-ui', 'worker']);
    expect(withoutCertificates(config)).toEqual([]);
    const copy = join(scratch, 'docker-compose-rw-certs.yml');
    writeFileSync(copy, readFileSync(file, 'utf8').replaceAll('troupe-tls:/etc/troupe/tls:ro', 'troupe-tls:/etc/troupe/tls'));
    const broken = composeConfig(copy, []);
    expect(broken.status, broken.stderr).toBe(0);
    expect(withoutCertificates(parse(broken.stdout) as Parameters<typeof withoutCertificates>[0]).sort()).toEqual(['temporal', 'temporal-setup', 'temporal-ui', 'worker']);
  });

  /** Why the resolved `temporal` service is not Troupe's server with its authorizer, or '' when it is. */
  const notTroupesServer = (config: { services: Record<string, { build?: string | { context?: string; dockerfile?: string }; image?: string; entrypoint?: string[] }> }) => {
    const server = config.services.temporal;
    const build = typeof server?.build === 'string' ? { context: server.build } : server?.build;
    if (build?.context !== join(projectRoot, 'deploy', 'temporal-server')) return `built from ${build?.context ?? '(nothing: an image)'}, not deploy/temporal-server`;
    if (!existsSync(join(build.context, build.dockerfile ?? 'Dockerfile'))) return `no ${build.dockerfile ?? 'Dockerfile'} in ${build.context}`;
    if (/^temporalio\/server:/.test(server?.image ?? '')) return `tagged ${server?.image ?? ''}, the release's image`;
    if (server?.entrypoint?.[0] !== 'troupe-temporal-server' || server.entrypoint.includes('--allow-no-auth')) return `starts ${server?.entrypoint?.join(' ') ?? '(the image\'s default)'}`;
    return '';
  };

  it("builds the server from deploy/temporal-server (Troupe's authorizer), not the release's image", () => {
    expect(notTroupesServer(resolved() as Parameters<typeof notTroupesServer>[0])).toBe('');
    const stock = readFileSync(file, 'utf8')
      .replace('    build: ./deploy/temporal-server\n    image: troupe-temporal-server:1.29.1\n', '    image: temporalio/server:1.29.1\n')
      .replace('      - troupe-temporal-server\n', '      - temporal-server\n');
    expect(stock).not.toBe(readFileSync(file, 'utf8'));
    const copy = join(scratch, 'docker-compose-stock-server.yml');
    writeFileSync(copy, stock);
    const r = composeConfig(copy, []);
    expect(r.status, r.stderr).toBe(0);
    expect(notTroupesServer(parse(r.stdout) as Parameters<typeof notTroupesServer>[0])).toMatch(/not deploy\/temporal-server/);
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
