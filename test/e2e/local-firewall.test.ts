import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalBackend } from '../../src/backends/local/local-backend';
import { nodeLinkNames, runWallKey } from '../../src/backends/local/local-names';
import { BRIDGE, BRIDGE_ADDRESS } from '../../src/backends/local/netns';
import { jobRef, LocalFleetHarness, makeRun, waitFor } from './local-fixtures';

/**
 * The firewall around each run of the local fleet in netns mode (issue 37, part 3), tried from
 * inside a job with real namespaces and real nftables: its own run's peer answers; a server on
 * 0.0.0.0 of the machine answers neither through the bridge address nor through the machine's
 * other address; a node of another run, running at the same time, does not answer. After both
 * runs, nothing of theirs is left in the ruleset.
 */

const SUBNET = '10.213.248.0/24';
const h = new LocalFleetHarness();
let backend: LocalBackend;
let machine: Server;
let machinePort: number;
/** An address of the machine's that is not the bridge's (eth0's), when it has one. */
const otherAddress =
  execFileSync('ip', ['-4', '-o', 'addr', 'show', 'scope', 'global'], { encoding: 'utf8' })
    .split('\n')
    .map((line) => line.split(/\s+/))
    .find((f) => f[1] !== undefined && f[1] !== BRIDGE && f[3] !== undefined && !f[3].startsWith('10.213.'))?.[3]
    ?.split('/')[0] ?? null;

/**
 * br_netfilter's switch (Kubernetes and Docker hosts load the module and turn it on): bridged frames
 * then also pass the IP hooks. Where the module is loaded, the wall is tried with it on and off.
 */
const BRIDGE_NF = '/proc/sys/net/bridge/bridge-nf-call-iptables';
const bridgeNfAsFound = existsSync(BRIDGE_NF) ? readFileSync(BRIDGE_NF, 'utf8').trim() : null;
const bridgeNfCases: Array<'on' | 'off' | 'not loaded'> = bridgeNfAsFound === null ? ['not loaded'] : ['on', 'off'];

beforeAll(async () => {
  backend = h.backend({ network: 'netns', subnet: SUBNET });
  expect(await backend.networkMode()).toBe('netns');
  machine = createServer((_, res) => res.end('machine'));
  await new Promise<void>((resolve) => machine.listen(0, '0.0.0.0', resolve));
  machinePort = (machine.address() as AddressInfo).port;
});

afterAll(async () => {
  if (bridgeNfAsFound !== null) writeFileSync(BRIDGE_NF, `${bridgeNfAsFound}\n`);
  machine.close();
  await h.cleanup();
});

/** The machine's own fetch (no wall on its side): the body, or throws. */
async function httpGet(url: string): Promise<string> {
  return await (await fetch(url, { signal: AbortSignal.timeout(3000) })).text();
}

const serve = (name: string) => `"$NODE" -e 'require("http").createServer((q, s) => s.end("${name}")).listen(8000, "0.0.0.0")' &`;
/** Prints `<what>=<body or "no">` after one try of at most 3 s. */
const probe = (what: string, url: string) => `echo "${what}=$(curl -s --max-time 3 ${url} || echo no)"`;

describe('local fleet firewall (netns mode, nftables)', () => {
  it.each(bridgeNfCases)("lets a job reach its own run's nodes and nothing else, and leaves no rule behind (br_netfilter: %s)", async (bridgeNf) => {
    if (bridgeNf !== 'not loaded') writeFileSync(BRIDGE_NF, bridgeNf === 'on' ? '1\n' : '0\n');
    const runB = makeRun([{ name: 'b', nodes: 1, commands: [serve('run-b'), 'wait'] }], { NODE: process.execPath });
    const nodesB = await h.provision(backend, runB);
    await h.start(backend, runB, nodesB);
    // The machine reaches a node (the worker does: replies to its own connections come back).
    await waitFor('run B to serve', async () => (await httpGet(`http://${nodesB[0]!.internal_ip}:8000/`).catch(() => '')) === 'run-b');

    const targets = [
      probe('other-run', `http://${nodesB[0]!.internal_ip}:8000/`),
      probe('bridge', `http://${BRIDGE_ADDRESS}:${machinePort}/`),
      ...(otherAddress ? [probe('machine', `http://${otherAddress}:${machinePort}/`)] : []),
    ];
    const runA = makeRun(
      [
        { name: 'server', nodes: 1, commands: [serve('run-a'), 'wait'] },
        {
          name: 'client',
          nodes: 1,
          commands: [
            'peer=${{ groups[0].nodes[0].IP_ADDRESS }}',
            'until curl -sf --max-time 1 "http://$peer:8000/" > peer.txt; do sleep 0.2; done',
            'echo "peer=$(cat peer.txt)"',
            ...targets,
            'echo probed',
          ],
        },
      ],
      { NODE: process.execPath },
    );
    const nodesA = await h.provision(backend, runA);
    if (otherAddress) {
      // What a job that is root in its namespace (TROUPE_LOCAL_ISOLATION=0) can do: send to the
      // machine's other address through the bridge's MAC, past the ARP that keeps it unanswered.
      const bridgeMac = readFileSync(`/sys/class/net/${BRIDGE}/address`, 'utf8').trim();
      const names = nodeLinkNames(nodesA[1]!.instance_id);
      execFileSync('ip', ['-n', names.netns, 'neigh', 'replace', otherAddress, 'lladdr', bridgeMac, 'dev', names.nodeLink]);
    }
    await h.start(backend, runA, nodesA);
    const client = jobRef(runA, 1, nodesA[1]!);
    const log = await waitFor('the probes', async () => {
      const data = (await backend.readLog(client, 0, 10_000)).data;
      return data.includes('probed') && data;
    }, 40_000);
    const seen = Object.fromEntries(log.split('\n').flatMap((line) => (/^[a-z-]+=/.test(line) ? [line.split('=', 2)] : [])));
    expect(seen).toEqual({ peer: 'run-a', 'other-run': 'no', bridge: 'no', ...(otherAddress ? { machine: 'no' } : {}) });
    // The server itself answers on both addresses (the wall, not the server, refused the job).
    expect(await httpGet(`http://${BRIDGE_ADDRESS}:${machinePort}/`)).toBe('machine');

    const keys = [runWallKey(h.stateDir, runA.runId, runA.submission), runWallKey(h.stateDir, runB.runId, runB.submission)];
    const during = execFileSync('nft', ['list', 'ruleset'], { encoding: 'utf8' });
    for (const key of keys) expect(during).toContain(`run_${key}`);

    await backend.releaseRun(runA.runId, runA.submission);
    await backend.releaseRun(runB.runId, runB.submission);
    const after = execFileSync('nft', ['list', 'ruleset'], { encoding: 'utf8' });
    for (const node of [...nodesA, ...nodesB]) expect(after).not.toContain(`"${nodeLinkNames(node.instance_id).hostLink}"`);
    for (const key of keys) expect(after).not.toContain(key);
  }, 90_000);

  it('adds nothing twice when provisioning is retried, and a restarted worker removes what a killed one left', async () => {
    const run = makeRun([{ name: 'w', nodes: 2, commands: ['sleep 60'] }]);
    const first = await h.provision(backend, run);
    // A retried provisioning (another worker process of the same fleet, at once).
    const again = h.backend({ network: 'netns', subnet: SUBNET });
    await Promise.all([h.provision(backend, run), h.provision(again, run)]);
    const key = runWallKey(h.stateDir, run.runId, run.submission);
    const table = execFileSync('nft', ['list', 'table', 'bridge', 'troupe'], { encoding: 'utf8' });
    for (const node of first) expect(table.split(`"${nodeLinkNames(node.instance_id).hostLink}" : jump run_${key}`)).toHaveLength(2);
    expect(table.split(`chain run_${key} {`)).toHaveLength(2);
    expect(table.split('ether type ip iifname vmap @ports')).toHaveLength(2);

    // A node given back alone (replaced, removed) leaves the wall; its run's other node stays in it.
    const [gone, kept] = first.map((node) => nodeLinkNames(node.instance_id).hostLink);
    await backend.releaseJob(jobRef(run, 0, first[0]!), 1);
    await backend.releaseJob(jobRef(run, 0, first[0]!), 1);
    const smaller = execFileSync('nft', ['list', 'table', 'bridge', 'troupe'], { encoding: 'utf8' });
    expect(smaller).not.toContain(`"${gone}"`);
    expect(smaller).toContain(`"${kept}" : jump run_${key}`);

    // A worker killed after the wall but whose records went (by hand here): the next one's reaper
    // pass removes the wall; another fleet's walls stay.
    const other = new LocalFleetHarness();
    const otherBackend = other.backend({ network: 'netns', subnet: '10.213.247.0/24' });
    const otherRun = makeRun([{ name: 'x', nodes: 1, commands: ['true'] }]);
    await other.provision(otherBackend, otherRun);
    // Kept aside and put back after, so the harness releases the nodes as usual.
    const aside = `${h.stateDir}/instances-aside`;
    execFileSync('sh', ['-c', `mkdir ${aside} && mv ${h.stateDir}/instances/*.json ${aside}/`]);
    try {
      const restarted = h.backend({ network: 'netns', subnet: SUBNET });
      await restarted.heldRuns();
      const left = execFileSync('nft', ['list', 'ruleset'], { encoding: 'utf8' });
      expect(left).not.toContain(key);
      expect(left).toContain(runWallKey(other.stateDir, otherRun.runId, otherRun.submission));
    } finally {
      execFileSync('sh', ['-c', `mv ${aside}/*.json ${h.stateDir}/instances/ && rmdir ${aside}`]);
      await other.cleanup();
    }
  }, 60_000);
});
