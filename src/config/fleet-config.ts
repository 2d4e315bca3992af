import { checkConfigType } from './config-type';
import { FleetConfigInputSchema, FleetConfigSchema, type FleetConfig } from './fleet-schema';
import { parseWithSchema } from './validate';
import { ConfigSource } from './yaml-source';

export interface LoadFleetOptions {
  /** The submitting shell's environment: bare `KEY` entries of `env` take their value from it. */
  environ: Record<string, string | undefined>;
}

/** dstack's rule for fleet (and run) names. */
const FLEET_NAME = /^[a-z][a-z0-9-]{1,40}$/;

/**
 * Parses and validates a fleet config (`type: fleet` with `ssh_config`) and resolves each host's
 * connection settings. Throws ConfigError (file:line:col, field path, reason).
 */
export function loadFleetConfig(text: string, file: string, opts: LoadFleetOptions): FleetConfig {
  const source = ConfigSource.parse(text, file);
  checkConfigType(source, 'fleet');
  const fleet = parseWithSchema(FleetConfigInputSchema, source);
  const name = fleet.name ?? null;
  if (name !== null && !FLEET_NAME.test(name)) {
    throw source.error(['name'], `fleet name "${name}" must match ^[a-z][a-z0-9-]{1,40}$ (lowercase letters, digits and -, starting with a letter)`);
  }
  const env: Record<string, string> = {};
  for (const entry of fleet.env ?? []) {
    const value = entry.value ?? opts.environ[entry.key];
    if (value === undefined) {
      throw source.error(['env', entry.at], `environment variable ${entry.key} is not set in this shell: export it, or write ${entry.key}=<value>`);
    }
    env[entry.key] = value;
  }
  // The schema's checks guarantee ssh_config, and a user and key for every host.
  const ssh = fleet.ssh_config;
  if (!ssh) throw source.error(['ssh_config'], 'a Troupe fleet needs `ssh_config`');
  const proxy = (p: typeof ssh.proxy_jump) =>
    p ? { hostname: p.hostname, port: p.port ?? 22, user: p.user, identity_file: p.identity_file } : null;
  return FleetConfigSchema.parse({
    name,
    placement: fleet.placement ?? 'any',
    network: ssh.network ?? null,
    env,
    hosts: ssh.hosts.map((host) => ({
      hostname: host.hostname,
      port: host.port ?? ssh.port ?? 22,
      user: host.user ?? ssh.user,
      identity_file: host.identity_file ?? ssh.identity_file,
      proxy_jump: proxy(host.proxy_jump ?? ssh.proxy_jump),
      internal_ip: host.internal_ip ?? null,
      blocks: host.blocks ?? fleet.blocks ?? 1,
    })),
  });
}
