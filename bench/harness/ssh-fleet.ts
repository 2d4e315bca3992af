import { closeAllSshSessions } from '../../src/backends/ssh';
import { SshBackend } from '../../src/fleet/ssh-backend';
import { FleetClient } from '../../src/fleet/fleet-client';
import { fleetSpecOf } from '../../src/fleet/fleet-spec';
import { loadFleetConfig } from '../../src/plan';
import { createTestHosts, jobDirOfTestHost, testHostsFleetYaml, type TestHostSpec, type TestHosts } from '../../test/e2e/hosts';
import type { BenchTemporal } from './temporal-env';

/**
 * SSH test hosts (sshd in network namespaces, test/e2e/hosts) as one fleet for a bench: the
 * hosts, a fleet client and the `ssh` backend for the bench's worker, on the bench's task queue.
 * The hosts need root; run every bench that makes them under the shared lock
 * (`flock /work/wt/ssh-hosts.lock …`): their subnet is fixed.
 */
export interface BenchSshFleet {
  hosts: TestHosts;
  fleetName: string;
  fleets: FleetClient;
  backend: SshBackend;
  /** Applies the fleet through its workflow (as `troupe fleet apply` does): call once the worker polls. Fails unless every host is ready. */
  apply(): Promise<void>;
  /** Deletes the fleet (its workflow needs the worker still polling). */
  remove(): Promise<void>;
  /** Closes the SSH sessions and destroys the hosts. */
  destroy(): Promise<void>;
}

export async function createBenchSshFleet(env: BenchTemporal, fleetName: string, taskQueue: string, specs: TestHostSpec[]): Promise<BenchSshFleet> {
  const hosts = await createTestHosts(specs);
  const fleets = new FleetClient(env.client, { taskQueue });
  const backend = new SshBackend({
    fleets,
    releaseGraceSeconds: 1,
    // The hosts share one disk: each keeps its jobs apart, as separate machines would.
    jobBaseDir: jobDirOfTestHost(hosts),
  });
  // The backend verifies host keys against this file (never trusts them blindly).
  const savedKnownHosts = process.env.TROUPE_KNOWN_HOSTS;
  process.env.TROUPE_KNOWN_HOSTS = hosts.knownHostsFile;
  return {
    hosts,
    fleetName,
    fleets,
    backend,
    async apply() {
      const yaml = testHostsFleetYaml(hosts, fleetName, specs.map((s) => s.name), 'cluster');
      const state = await fleets.apply(fleetSpecOf(loadFleetConfig(yaml, `${fleetName}.yml`, { environ: {} }), `${fleetName}.yml`));
      const unusable = state.hosts.filter((h) => h.status !== 'ready');
      if (unusable.length > 0) throw new Error(`fleet hosts not ready: ${JSON.stringify(unusable.map((h) => [h.spec.target.hostname, h.reason]))}`);
    },
    async remove() {
      await fleets.delete(fleetName, { force: true }).catch((err: unknown) => console.error(`fleet ${fleetName} not deleted: ${String(err)}`));
    },
    async destroy() {
      await closeAllSshSessions();
      await hosts.destroy();
      if (savedKnownHosts === undefined) delete process.env.TROUPE_KNOWN_HOSTS;
      else process.env.TROUPE_KNOWN_HOSTS = savedKnownHosts;
    },
  };
}
