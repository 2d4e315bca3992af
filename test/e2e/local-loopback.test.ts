import { afterAll, describe, expect, it } from 'vitest';
import { alive, jobRef, LocalFleetHarness, makeRun, waitFor } from './local-fixtures';

/**
 * The local fleet in loopback mode (what a machine without root or `ip netns` gets): every node has
 * its own 127.x.y.z address and binds it, since all nodes share the host's ports.
 */

const h = new LocalFleetHarness();
afterAll(() => h.cleanup());

describe('local fleet, loopback mode', () => {
  it('gives each node its own 127.x.y.z; nodes bind it and reach each other on one port', async () => {
    const backend = h.backend({ network: 'loopback', subnet: '127.213.250.0/24' });
    expect(await backend.networkMode()).toBe('loopback');
    // A node finds its own address as line DSTACK_NODE_RANK+1 of DSTACK_NODES_IPS.
    const commands = [
      'me=$(sed -n "$((DSTACK_NODE_RANK + 1))p" <<< "$DSTACK_NODES_IPS")',
      `"$NODE" -e 'require("http").createServer((q, s) => s.end(process.argv[1])).listen(8000, process.argv[1])' "$me" &`,
      'if [ "$DSTACK_NODE_RANK" = 0 ]; then peer=${{ groups[0].nodes[1].IP_ADDRESS }}; else peer=${{ groups[0].nodes[0].IP_ADDRESS }}; fi',
      'until curl -sf "http://$peer:8000/" > peer.txt; do sleep 0.1; done',
      'echo "$me got $(cat peer.txt)"',
      'wait',
    ];
    const run = makeRun([{ name: 'pair', nodes: 2, commands }], { NODE: process.execPath });
    const instances = await h.provision(backend, run);
    const [a, b] = instances.map((i) => i.internal_ip);
    expect(a).toMatch(/^127\.213\.250\.\d+$/);
    expect(b).not.toBe(a);
    expect(instances.every((i) => i.details.mode === 'loopback')).toBe(true);
    const refs = instances.map((instance, num) => jobRef(run, num, instance));
    for (const ref of refs) expect(await backend.runnerReady(ref)).toBe(true);
    const pids = await h.start(backend, run, instances);
    await waitFor('node 0 to reach node 1', async () => (await backend.readLog(refs[0]!, 0, 1000)).data.includes(`${a} got ${b}`));
    await waitFor('node 1 to reach node 0', async () => (await backend.readLog(refs[1]!, 0, 1000)).data.includes(`${b} got ${a}`));
    await Promise.all(refs.map((ref) => backend.stopJob(ref, 2)));
    for (const pid of pids) expect(await alive(pid)).toBe(false);
    for (const ref of refs) expect(await backend.jobState(ref)).toMatchObject({ state: 'exited', exit_code: 143 });
  });

  it('runs a job to its exit code and releases its address', async () => {
    const backend = h.backend({ network: 'loopback', subnet: '127.213.251.0/24', capacity: 1 });
    const run = makeRun([{ name: 'main', nodes: 1, commands: ['echo "on $DSTACK_MASTER_NODE_IP"', 'exit 5'] }]);
    const [instance] = await h.provision(backend, run);
    const ref = jobRef(run, 0, instance!);
    await h.start(backend, run, [instance!]);
    await waitFor('exit', async () => (await backend.jobState(ref)).state === 'exited');
    expect(await backend.jobState(ref)).toMatchObject({ exit_code: 5 });
    expect((await backend.readLog(ref, 0, 100)).data).toBe(`on ${instance!.internal_ip}\n`);
    await backend.releaseRun(run.runId, run.submission);
    // The one address of a fleet of capacity 1 is free again for the next run.
    const next = makeRun([{ name: 'main', nodes: 1, commands: ['true'] }]);
    expect((await h.provision(backend, next))[0]!.internal_ip).toBe(instance!.internal_ip);
  });
});
