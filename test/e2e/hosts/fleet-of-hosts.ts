import type { TestHosts } from './test-hosts';

/**
 * Test hosts as a fleet of the `ssh` backend: where each host keeps its jobs (the hosts share this
 * machine's disk, so each has a directory of its own, as separate machines would), and the fleet
 * config a user would write for some of them (a host behind a jump host gets its proxy_jump).
 */

/** The `ssh` backend's jobBaseDir for these hosts: each host's own directory, by its address. */
export function jobDirOfTestHost(hosts: TestHosts): (target: { hostname: string }) => string {
  const byAddress = new Map(Object.values(hosts.hosts).map((h) => [h.address, h.jobBaseDir]));
  return ({ hostname }) => {
    const dir = byAddress.get(hostname);
    if (!dir) throw new Error(`no test host at ${hostname}`);
    return dir;
  };
}

/** A fleet config (`type: fleet`) of these hosts, logging in as root with the harness's client key. */
export function testHostsFleetYaml(hosts: TestHosts, name: string, hostNames: readonly string[], placement: 'any' | 'cluster' = 'any'): string {
  const key = hosts.clientKeyPath;
  const lines = ['type: fleet', `name: ${name}`, `placement: ${placement}`, 'ssh_config:', '  user: root', `  identity_file: ${key}`, '  hosts:'];
  for (const hostName of hostNames) {
    const host = hosts.host(hostName);
    if (!host.behindJump) {
      lines.push(`    - ${host.address}`);
      continue;
    }
    const jump = hosts.host(host.behindJump);
    lines.push(`    - hostname: ${host.address}`, `      proxy_jump: {hostname: ${jump.address}, user: root, identity_file: ${key}}`);
  }
  return `${lines.join('\n')}\n`;
}
