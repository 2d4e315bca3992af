import { describe, expect, it } from 'vitest';
import { hostEntries, hostNameOf, hostsFromBook, nodeHostName, renderNodeHosts } from '../../src/runner/node-hosts';
import { renderJobFiles } from '../../src/runner/job-files';
import { buildClusterInfo } from '../../src/runner/cluster-info';
import { makePlan } from '../helpers/plans';

describe("a node's name and /etc/hosts", () => {
  it('names node i of a group <group>-<i>, and of a group named by its index node<g>-<i>', () => {
    expect(nodeHostName('workers', 1, 2)).toBe('workers-2');
    expect(nodeHostName('0', 0, 1)).toBe('node0-1');
    expect(() => nodeHostName('Bad Name', 0, 0)).toThrow(/not a host name/);
  });

  it('resolves its own name to its own address first, then every peer by name', () => {
    const peers = hostEntries(['head', 'workers'], [['10.213.1.2'], ['10.213.1.3', null, '10.213.1.5']]);
    expect(peers).toEqual([
      { ip: '10.213.1.2', name: 'head-0' },
      { ip: '10.213.1.3', name: 'workers-0' },
      { ip: '10.213.1.5', name: 'workers-2' },
    ]);
    const { hostname, hosts } = renderNodeHosts({ ip: '10.213.1.3', name: 'workers-0' }, peers);
    expect(hostname).toBe('workers-0');
    const lines = hosts.split('\n').filter((l) => l && !l.startsWith('#'));
    expect(lines).toEqual([
      '127.0.0.1\tlocalhost',
      '::1\tlocalhost ip6-localhost ip6-loopback',
      '10.213.1.3\tworkers-0',
      '10.213.1.2\thead-0',
      '10.213.1.5\tworkers-2',
    ]);
    // Never 127.0.0.1 for its own name: programs that find their address from it get the node's.
    expect(lines.some((l) => l.startsWith('127.') && l.includes('workers-0'))).toBe(false);
  });

  it('refuses an address that could break the file, and leaves out nodes that go by host names', () => {
    expect(() => renderNodeHosts({ ip: '10.0.0.1\n1.2.3.4', name: 'a-0' }, [])).toThrow(/not an address/);
    expect(hostEntries(['a'], [['gpu-host.example', '10.0.0.2', 'fe80::1']]).map((e) => e.ip)).toEqual(['10.0.0.2', 'fe80::1']);
  });

  it("comes with a job's files, named from the run's groups", () => {
    const plan = makePlan('r', [
      { name: 'head', nodes: 1 },
      { name: 'driver', nodes: 1 },
    ]);
    const filesAt = (ips: [string, string]) =>
      renderJobFiles({
        run: plan,
        runUid: 'uid',
        job: plan.jobs[1]!,
        cluster: buildClusterInfo(ips, [0, 0], 1),
        addresses: [[ips[0]], [ips[1]]],
        jobDirectory: '/j',
        groupNames: ['head', 'driver'],
      });
    const files = filesAt(['10.213.1.2', '10.213.1.3']);
    expect(files.node?.hostname).toBe('driver-0');
    expect(files.node?.hosts).toContain('10.213.1.3\tdriver-0\n10.213.1.2\thead-0\n');
    // A node that goes by a host name gets none (its machine's own stays).
    const named = filesAt(['10.213.1.2', 'gpu-host.example']);
    expect(named.node).toBeNull();
  });

  it('is made again from the live address book: a peer at a new address resolves there; the node keeps its name', () => {
    const start = renderNodeHosts({ ip: '10.213.1.2', name: 'router-0' }, [{ ip: '10.213.1.3', name: 'decode-0' }]);
    expect(hostNameOf(start.hosts)).toBe('router-0');
    const node = (group_rank: number, ip: string | null) => ({ rank: 0, group_rank, ip, gpus: 0, attempt: 1, status: 'running', ready: true });
    const book = (decodeIp: string | null, routerIp: string | null) =>
      JSON.stringify({
        version: 3,
        run_name: 'r',
        groups: [
          { name: 'router', index: 0, nodes: [node(0, routerIp)] },
          { name: 'decode', index: 1, nodes: [node(0, decodeIp), node(1, '10.213.1.9')] },
        ],
      });
    const again = hostsFromBook(book('10.213.1.7', '10.213.1.2'), 'router-0');
    expect(again?.hosts.split('\n').filter((l) => l && !l.startsWith('#')).slice(2)).toEqual(['10.213.1.2\trouter-0', '10.213.1.7\tdecode-0', '10.213.1.9\tdecode-1']);
    // The node itself without an address (being replaced): nothing to write.
    expect(hostsFromBook(book('10.213.1.7', null), 'router-0')).toBeNull();
  });
});
