import { dirname, isAbsolute, resolve } from 'node:path';
import type { FleetConfig, SshHost } from '../config/fleet-schema';
import type { SshTarget } from '../backends/ssh/target';
import type { FleetSpec } from '../contract/fleet-schemas';

/** What of a fleet config Troupe does not use (yet), said once when the fleet is applied. */
export function ignoredFleetSettings(config: FleetConfig): string[] {
  const notes: string[] = [];
  const blocks = [...new Set(config.hosts.map((h) => h.blocks).filter((b) => b !== 1))];
  if (blocks.length > 0) notes.push(`blocks: ${blocks.join(', ')} is not supported: every job gets a whole host`);
  if (Object.keys(config.env).length > 0) notes.push('env of the fleet is not applied to jobs: set it in the task\'s env');
  return notes;
}

/**
 * A key path as the workers will read it: `~/` stays (the worker's home), a relative path is taken
 * from the fleet file's folder, so the file can be applied from anywhere.
 */
function keyPath(path: string, configFile: string): string {
  if (path === '~' || path.startsWith('~/') || isAbsolute(path)) return path;
  return resolve(dirname(configFile), path);
}

function targetOf(host: SshHost, configFile: string): SshTarget {
  const jump = host.proxy_jump;
  return {
    hostname: host.hostname,
    port: host.port,
    user: host.user,
    identity_file: keyPath(host.identity_file, configFile),
    ...(jump
      ? { proxy_jump: { hostname: jump.hostname, port: jump.port, user: jump.user, identity_file: keyPath(jump.identity_file, configFile) } }
      : {}),
  };
}

/** The FleetWorkflow's spec of a parsed fleet config; `name` overrides the config's. */
export function fleetSpecOf(config: FleetConfig, configFile: string, name?: string): FleetSpec {
  const fleetName = name ?? config.name;
  if (!fleetName) throw new Error(`${configFile}: the fleet has no name: set \`name:\` in the file or pass --name`);
  return {
    name: fleetName,
    placement: config.placement,
    hosts: config.hosts.map((host) => ({
      target: targetOf(host, configFile),
      internal_ip: host.internal_ip,
      network: config.network,
    })),
  };
}
