import { afterAll, describe, expect, it } from 'vitest';
import { makeLocalFleet } from '../helpers/local-fleet';
import { stopRunsLeftGoing, useLocalTroupe } from '../helpers/local-troupe';
import { twoNodeTask } from '../helpers/inter-node-ssh';

/**
 * Issue 37, part 2, through a whole run on the local fleet (netns, as root): an SSH session a peer
 * opens on a node (how mpirun reaches it) runs with no_new_privs and cannot make a user namespace,
 * like the node's own commands.
 */

const env = useLocalTroupe(makeLocalFleet('troupe-privileges-', { network: 'netns' }));
const started: string[] = [];

afterAll(async () => {
  await stopRunsLeftGoing(env.troupe, started);
});

describe.skipIf(process.getuid?.() !== 0)('an SSH session into a node (local fleet, netns)', () => {
  it('has no_new_privs and cannot unshare -Ur', async () => {
    const name = `nnp-${env.worker.taskQueue.slice(-8)}`;
    const peer = `"$(sed -n 2p <<< "$DSTACK_NODES_IPS")"`;
    const head = [
      `ssh ${peer} 'sed -n "s/^NoNewPrivs:[[:space:]]*/peer-session-nnp=/p" /proc/self/status'`,
      `ssh ${peer} 'unshare -Ur true 2>/dev/null; echo "peer-session-userns=$?"'`,
    ];
    started.push(name);
    const handle = await env.troupe.submit({ yaml: twoNodeTask(name, head), runName: name });
    const state = await handle.wait();
    const log = (await env.troupe.run(name).readLog(0)).data;
    expect(state.status, log).toBe('DONE');
    expect(log).toContain('peer-session-nnp=1\n');
    expect(log).toContain('peer-session-userns=1\n');
  });
});
