import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { quoteShellWord } from '../../src/runner/shell-quote';
import { makeLocalFleet } from '../helpers/local-fleet';
import { useLocalTroupe } from '../helpers/local-troupe';

/**
 * What an isolated node of the local fleet sees (README: What a node sees), as root with network
 * namespaces: two nodes of one run on this machine, each with its own host name resolving to its
 * own address, the peer by name, its own /tmp, /dev/shm, TMPDIR and SysV IPC; a forkserver pool
 * works (its socket path fits); address detection by a UDP "connect" gets the node's address; and
 * nothing beyond the run's nodes is reachable: neither the machine's gateway nor a service bound
 * to the machine's own address on its outward interface.
 */

const root = process.getuid?.() === 0;
const fleet = makeLocalFleet('troupe-sandbox-');
const env = useLocalTroupe(fleet);
let outside: Server | null = null;
let outsideAddress = '';
let gateway = '';

beforeAll(async () => {
  if (!root) return;
  // The machine's outward address and its gateway, where a packet would leave from.
  const route = execFileSync('ip', ['-4', 'route', 'get', '1.1.1.1'], { encoding: 'utf8' });
  outsideAddress = /\bsrc (\S+)/.exec(route)?.[1] ?? '';
  gateway = /\bvia (\S+)/.exec(route)?.[1] ?? '198.51.100.1';
  outside = createServer((socket) => socket.end('outside\n'));
  await new Promise<void>((resolve) => outside!.listen(0, outsideAddress, resolve));
});
afterAll(() => outside?.close());

const probe = String.raw`
import multiprocessing as mp, socket, sys
with mp.get_context("forkserver").Pool(2) as pool:
    print("forkserver", sum(pool.map(abs, range(-3, 4))), flush=True)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.connect(("8.8.8.8", 53))
print("udp source", udp.getsockname()[0], flush=True)
for host, port in [(sys.argv[1], int(sys.argv[2])), (sys.argv[3], 80)]:
    c = socket.socket()
    c.settimeout(5)
    try:
        c.connect((host, port))
        print("reached", host, flush=True)
    except OSError:
        print("unreachable", host, flush=True)
`;

function task(name: string, port: number): string {
  const commands = [
    'echo "host $(hostname) $(getent hosts "$(hostname)" | cut -d" " -f1)"',
    'echo "peers $(getent hosts a-0 | cut -d" " -f1) $(getent hosts b-0 | cut -d" " -f1)"',
    'echo "tmpdir $TMPDIR"',
    'if [ -e /tmp/x ]; then echo "saw another /tmp/x"; fi',
    'echo "$DSTACK_NODE_RANK" > /tmp/x',
    'if [ "$DSTACK_NODE_RANK" = 0 ]; then ipcmk -M 4096 >/dev/null; fi',
    'sleep 1',
    'echo "mine $(cat /tmp/x)"',
    `echo "sysv $(ipcs -m | grep -c '^0x')"`,
    `python3 -c ${quoteShellWord(probe)} ${outsideAddress} ${port} ${gateway}`,
  ];
  const group = (g: string) => [`  - name: ${g}`, '    commands:', ...commands.map((c) => `      - ${JSON.stringify(c)}`)];
  return ['type: task', `name: ${name}`, 'groups:', ...group('a'), ...group('b'), ''].join('\n');
}

describe.skipIf(!root)('an isolated node is a machine of its own (local fleet, network namespaces)', () => {
  it('names, /tmp, IPC, a forkserver pool, its own address for detection, and no way out', async () => {
    const port = (outside!.address() as { port: number }).port;
    const handle = await env.troupe.submit({ yaml: task(`sandbox-${env.worker.taskQueue.slice(-6)}`, port) });
    const state = await handle.wait();
    const logs = await Promise.all(state.jobs.map(async (j) => (await handle.readLog(j.job_num)).data));
    expect(state.status, logs.join('\n----\n')).toBe('DONE');
    const [ipA, ipB] = state.jobs.map((j) => j.instance?.internal_ip ?? '?');
    logs.forEach((log, i) => {
      const [name, ip] = i === 0 ? ['a-0', ipA] : ['b-0', ipB];
      const lines = log.trim().split('\n');
      expect(lines).toEqual([
        `host ${name} ${ip}`,
        `peers ${ipA} ${ipB}`,
        'tmpdir /tmp',
        `mine ${i}`,
        // Node a's SysV segment is in its own IPC namespace: node b sees none.
        `sysv ${i === 0 ? 1 : 0}`,
        'forkserver 12',
        `udp source ${ip}`,
        `unreachable ${outsideAddress}`,
        `unreachable ${gateway}`,
      ]);
    });
    expect(existsSync('/tmp/x') && ['0\n', '1\n'].includes(String(execFileSync('cat', ['/tmp/x'])))).toBe(false);
  });
});
