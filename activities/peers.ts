import { mapLimit } from '../src/concurrency/map-limit';
import { quoteShellWord } from '../src/runner/shell-quote';
import { backendFor } from './backend-lookup';
import { whileHeartbeating } from './heartbeat';
import type { BackendRegistry, PublishPeersInput, PublishPeersResult } from './types';

/** Nodes written to (or hooks run) at once: each is a file write or an SSH round trip. */
const CONCURRENCY = 32;

export function createPeersActivities(backends: BackendRegistry) {
  return {
    /**
     * Writes this version of the run's address book to every listed node's peers.json (a node
     * never goes back to an older version), then runs each due `on_peers_change` on its node, as
     * the job's user, in the job's environment with TROUPE_PEERS_VERSION. A hook's failure is
     * answered, not thrown: it is the job's, and must not repeat the writes.
     */
    async publishPeers({ backend, peers, jobs, hooks, hook_timeout_s }: PublishPeersInput): Promise<PublishPeersResult> {
      const target = backendFor(backends, backend);
      return await whileHeartbeating(async () => {
        await mapLimit(jobs, CONCURRENCY, (job) => target.writePeers(job, peers));
        const results = await mapLimit(hooks, CONCURRENCY, async ({ job, label, command }) => {
          const script = `export TROUPE_PEERS_VERSION=${quoteShellWord(String(peers.version))}\n${command}`;
          const { exit_code, output } = await target.exec(job, script, hook_timeout_s * 1000);
          return { job_num: job.job_num, label, exit_code, output };
        });
        return { hooks: results };
      });
    },

  };
}
