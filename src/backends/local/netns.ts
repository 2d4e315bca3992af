import { readFile, stat, writeFile } from 'node:fs/promises';
import type { NodeLinkNames } from './local-names';
import { spawner, type CommandResult } from './spawner';
import { pathExists } from './state-files';

/**
 * Network namespaces for local nodes: each node gets its own namespace with a veth into the bridge
 * `trpl0` (10.213.0.1/16 in the root namespace), so two nodes can both listen on 0.0.0.0:8000 and
 * reach each other (and the root namespace reaches them). Every step is idempotent and tolerates a
 * concurrent identical step by another worker process: "already exists" counts as done once the
 * result is checked to be there.
 *
 * A node's default route is on-link through its veth (`default dev <link> src <address>`), with
 * no gateway: programs that find their address by "connecting" a UDP socket toward a public
 * address (Ray, Dask, gloo) get the node's own address, yet no packet can leave. A destination
 * beyond the run's nodes is looked up by ARP on the bridge, where nobody answers for it: the root
 * namespace answers on the bridge only for the bridge's own address (`arp_ignore=1` on it, so not
 * for the machine's other addresses), and proxy ARP stays off; no frame ever reaches the root
 * namespace's routing, so nothing is forwarded whatever `ip_forward` says.
 */

export const BRIDGE = 'trpl0';
/** `addr_assign_type` of an address set by `ip link set … address` (NET_ADDR_SET). */
const ADDR_SET_BY_USER = '3';
export const BRIDGE_ADDRESS = '10.213.0.1';
export const BRIDGE_SUBNET = '10.213.0.0/16';
const PREFIX = 16;

function ip(args: readonly string[]): Promise<CommandResult> {
  return spawner.run('ip', args);
}

async function ipOrThrow(args: readonly string[]): Promise<string> {
  const r = await ip(args);
  if (r.code !== 0) throw new Error(`ip ${args.join(' ')} failed: ${r.stderr.trim() || `exit ${r.code}`}`);
  return r.stdout;
}

/** Runs a creating step; a failure is fine when `done()` shows another process did it. */
async function create(args: readonly string[], done: () => Promise<boolean>): Promise<void> {
  if (await done()) return;
  const r = await ip(args);
  if (r.code !== 0 && !(await done())) throw new Error(`ip ${args.join(' ')} failed: ${r.stderr.trim()}`);
}

const linkExists = (name: string) => pathExists(`/sys/class/net/${name}`);
const netnsExists = (name: string) => pathExists(`/run/netns/${name}`);

/** True when this process may create namespaces: root, and `ip netns` answers. */
export async function netnsAvailable(): Promise<boolean> {
  if (process.getuid?.() !== 0) return false;
  return (await ip(['netns', 'list'])).code === 0;
}

/** The bridge, set up once per process (and again whenever a node's set-up has to take the slow path). */
let bridgeReady: Promise<void> | null = null;
function ensureBridgeOnce(): Promise<void> {
  bridgeReady ??= ensureBridge().catch((err: unknown) => {
    bridgeReady = null;
    throw err;
  });
  return bridgeReady;
}

export async function ensureBridge(): Promise<void> {
  await create(['link', 'add', BRIDGE, 'type', 'bridge'], () => linkExists(BRIDGE));
  // `replace` is idempotent where `add` would fail on a second call.
  await ipOrThrow(['addr', 'replace', `${BRIDGE_ADDRESS}/${PREFIX}`, 'dev', BRIDGE]);
  await ipOrThrow(['link', 'set', BRIDGE, 'up']);
  await pinBridgeAddress();
  await closeBridgeArp();
}

/**
 * The bridge keeps one MAC address. Left to the kernel, a bridge takes the lowest MAC of its ports
 * and changes it when that port goes: every namespace's ARP entry for the bridge's address is then
 * stale, and what a node sends to the machine (a replica answering the gateway) is lost until ARP
 * asks again — seen as a request hanging ~10 s on a replica that stayed when another was removed.
 * Setting the address (even to the one it has) makes it the bridge's own (addr_assign_type 3).
 */
async function pinBridgeAddress(): Promise<void> {
  const sys = `/sys/class/net/${BRIDGE}`;
  if ((await readFile(`${sys}/addr_assign_type`, 'utf8')).trim() === ADDR_SET_BY_USER) return;
  const address = (await readFile(`${sys}/address`, 'utf8')).trim();
  await ipOrThrow(['link', 'set', BRIDGE, 'address', address]);
}

/** The root namespace answers ARP on the bridge for the bridge's address only, and proxies none. */
async function closeBridgeArp(): Promise<void> {
  const conf = `/proc/sys/net/ipv4/conf/${BRIDGE}`;
  await writeFile(`${conf}/arp_ignore`, '1\n');
  await writeFile(`${conf}/proxy_arp`, '0\n');
}

/** The node's default route: on-link through its veth, from its own address (see the top of this file). */
function defaultRoute(names: NodeLinkNames, address: string): string[] {
  return ['route', 'replace', 'default', 'dev', names.nodeLink, 'src', address];
}

/**
 * Namespace, veth pair on the bridge, the node's address and loopback, all up. `beforeBridge`
 * (the run's firewall wall, being set up meanwhile) is awaited before the node's port joins the
 * bridge: the namespace and its links are made while it runs, the port is on the bridge only once
 * it has resolved (and never if it throws).
 */
export async function ensureNodeNetwork(names: NodeLinkNames, address: string, beforeBridge?: () => Promise<void>): Promise<void> {
  // Every step is idempotent; workers provisioning the same node at once can still trip over each
  // other's half-done steps (a link seen between its creation and its move), so a failed pass is
  // run again before it counts.
  if (await createNodeNetworkAtOnce(names, address, beforeBridge)) return;
  for (let attempt = 1; ; attempt++) {
    try {
      await ensureNodeNetworkOnce(names, address, beforeBridge);
      return;
    } catch (err) {
      if (attempt >= 4) throw err;
      await new Promise((r) => setTimeout(r, 50 * attempt));
    }
  }
}

/**
 * The common case, a node whose namespace and links do not exist yet: two `ip -batch` runs (in the
 * root namespace, then in the node's) from one small shell, instead of a dozen `ip` processes each
 * forked from this (large) process. False when anything was there already or a step failed: the
 * step-by-step path then checks and completes each one.
 */
/**
 * The node's MAC, derived from its address (`02:54:` and the four bytes: locally administered,
 * unicast). A new node at an address an earlier node had (a replacement, a resize) answers with
 * the same MAC, so the peers' neighbour caches, which keep an entry REACHABLE for up to ~45 s,
 * stay right instead of sending it to the old machine's vanished link.
 */
export function nodeMac(address: string): string {
  const bytes = address.split('.').map((b) => Number(b).toString(16).padStart(2, '0'));
  return ['02', '54', ...bytes].join(':');
}

async function createNodeNetworkAtOnce(names: NodeLinkNames, address: string, beforeBridge?: () => Promise<void>): Promise<boolean> {
  await ensureBridgeOnce();
  if ((await netnsExists(names.netns)) || (await linkExists(names.hostLink))) return false;
  const joinBridge = `link set ${names.hostLink} master ${BRIDGE} up`;
  const outside = [
    `netns add ${names.netns}`,
    `link add ${names.hostLink} type veth peer name ${names.nodeLink} netns ${names.netns}`,
    ...(beforeBridge ? [] : [joinBridge]),
  ];
  const inside = [
    `link set ${names.nodeLink} address ${nodeMac(address)}`,
    `addr replace ${address}/${PREFIX} dev ${names.nodeLink}`,
    `link set ${names.nodeLink} up`,
    'link set lo up',
    defaultRoute(names, address).join(' '),
  ];
  // Names and addresses are ours (hex and dotted digits): nothing here needs quoting.
  const script = [`ip -batch - <<'OUT' || exit 1`, ...outside, 'OUT', `exec ip -n ${names.netns} -batch - <<'IN'`, ...inside, 'IN', ''].join('\n');
  if ((await spawner.run('sh', ['-c', script])).code !== 0) return false;
  if (!beforeBridge) return true;
  await beforeBridge();
  return (await ip(joinBridge.split(' '))).code === 0;
}

async function ensureNodeNetworkOnce(names: NodeLinkNames, address: string, beforeBridge?: () => Promise<void>): Promise<void> {
  await ensureBridge();
  await create(['netns', 'add', names.netns], () => netnsExists(names.netns));
  // Both ends of a veth pair are created in one step, so a bridge end without its peer in the
  // namespace is stale: left from an earlier namespace of this name, and dying with it.
  const peerInside = async () => (await ip(['-n', names.netns, 'link', 'show', 'dev', names.nodeLink])).code === 0;
  if ((await linkExists(names.hostLink)) && !(await peerInside())) await ip(['link', 'del', names.hostLink]);
  await create(
    ['link', 'add', names.hostLink, 'type', 'veth', 'peer', 'name', names.nodeLink, 'netns', names.netns],
    async () => (await linkExists(names.hostLink)) && (await peerInside()),
  );
  await beforeBridge?.();
  await ipOrThrow(['link', 'set', names.hostLink, 'master', BRIDGE, 'up']);
  await ipOrThrow(['-n', names.netns, 'link', 'set', names.nodeLink, 'address', nodeMac(address)]);
  await ipOrThrow(['-n', names.netns, 'addr', 'replace', `${address}/${PREFIX}`, 'dev', names.nodeLink]);
  await ipOrThrow(['-n', names.netns, 'link', 'set', names.nodeLink, 'up']);
  await ipOrThrow(['-n', names.netns, 'link', 'set', 'lo', 'up']);
  await ipOrThrow(['-n', names.netns, ...defaultRoute(names, address)]);
}

/** True when the node's namespace holds its address on an up link and the bridge end is up. */
export async function nodeNetworkReady(names: NodeLinkNames, address: string): Promise<boolean> {
  if (!(await netnsExists(names.netns)) || !(await linkExists(names.hostLink))) return false;
  if (!(await linkIsUp(names.hostLink))) return false;
  const inside = await ip(['-n', names.netns, '-o', '-4', 'addr', 'show', 'dev', names.nodeLink, 'up']);
  return inside.code === 0 && inside.stdout.includes(` ${address}/`);
}

/** IFF_UP in the link's flags (what `ip link show … up` filters on), read without a process. */
async function linkIsUp(name: string): Promise<boolean> {
  try {
    return (Number.parseInt((await readFile(`/sys/class/net/${name}/flags`, 'utf8')).trim(), 16) & 1) === 1;
  } catch {
    return false;
  }
}

/** Inode of the namespace, to recognise the processes that live in it (/proc/PID/ns/net). */
export async function netnsInode(name: string): Promise<number | null> {
  try {
    return (await stat(`/run/netns/${name}`)).ino;
  } catch {
    return null;
  }
}

/**
 * Deletes many nodes' namespaces at once: one `ip -force -batch` (it goes on past a line that
 * fails) from one small shell, instead of a process or two per node forked for each. Best effort:
 * removeNodeNetwork, run for each node after it, checks what is left and removes it step by step.
 */
export async function removeNodeNetworks(all: readonly NodeLinkNames[]): Promise<void> {
  for (let i = 0; i < all.length; i += REMOVE_BATCH) {
    const present = (await Promise.all(all.slice(i, i + REMOVE_BATCH).map(async (n) => ((await netnsExists(n.netns)) ? n : null)))).filter((n) => n !== null);
    if (present.length === 0) continue;
    // Names are ours (a prefix and hex): nothing here needs quoting.
    await spawner.run('sh', ['-c', [`ip -force -batch - <<'DEL'`, ...present.map((n) => `netns del ${n.netns}`), 'DEL', ''].join('\n')]);
  }
  // The kernel takes the veth pairs down with their namespaces a moment later, in batches of its
  // own: waited for (a while), so that removeNodeNetwork need not delete each one by a process.
  const deadline = Date.now() + LINKS_GONE_WAIT_MS;
  let left = all;
  while (left.length > 0 && Date.now() < deadline) {
    left = (await Promise.all(left.map(async (n) => ((await linkExists(n.hostLink)) ? n : null)))).filter((n) => n !== null);
    if (left.length > 0) await new Promise((r) => setTimeout(r, 50));
  }
}
const LINKS_GONE_WAIT_MS = 3_000;
/** Lines per `ip -batch` of removeNodeNetworks: its shell's script stays a few KiB. */
const REMOVE_BATCH = 256;

/** Deletes the namespace (which destroys the veth pair) and the bridge end if it is left. */
export async function removeNodeNetwork(names: NodeLinkNames): Promise<void> {
  if (await netnsExists(names.netns)) {
    const r = await ip(['netns', 'del', names.netns]);
    if (r.code !== 0 && (await netnsExists(names.netns))) {
      throw new Error(`ip netns del ${names.netns} failed: ${r.stderr.trim()}`);
    }
  }
  if (await linkExists(names.hostLink)) {
    const r = await ip(['link', 'del', names.hostLink]);
    if (r.code !== 0 && (await linkExists(names.hostLink))) {
      throw new Error(`ip link del ${names.hostLink} failed: ${r.stderr.trim()}`);
    }
  }
}
