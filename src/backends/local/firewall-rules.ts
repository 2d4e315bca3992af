/**
 * The nftables text of the local fleet's firewall (pure: firewall.ts applies it with `nft -f -`).
 *
 * Two machine-wide tables named `troupe`, shared by every fleet on the machine and never removed
 * (they hold nothing of any run; without node ports they match nothing):
 *
 * - `bridge troupe`: node ↔ node. Frames between two nodes are bridged at layer 2 and never reach
 *   the IP stack, so only the bridge family sees them. A node's port (its veth end on the bridge)
 *   is in the map `ports`, which jumps to its run's chain `run_<key>`; that chain accepts a frame
 *   only when it comes from its port's own address and leaves through a port of the same run
 *   toward that port's own address (the set `nodes_<key>` of port . address), and drops
 *   everything else. Keyed by ports, not by addresses alone, so a job (root in its namespace)
 *   that changes its address or forges a MAC gains nothing. ARP passes (a node must find its peers); everything but ARP and IPv4 from a node's
 *   port is dropped. A port in no run (a node of a worker without the wall) cannot reach a walled
 *   one.
 * - `inet troupe`: node → machine. Nothing a node sends through the bridge device reaches the
 *   machine's sockets (whatever address it is sent to: the bridge's or any other of the machine's)
 *   except replies to connections the machine opened (the worker reaches nodes, a node never
 *   reaches the worker); nothing from the bridge is forwarded, whatever `ip_forward` says.
 *
 * Each change is one transaction (one `nft -f -`): adding a batch of nodes is one process however
 * many nodes it has, and `add` of what is there already changes nothing, so a retried
 * provisioning adds nothing twice.
 */

export const WALL_TABLE = 'troupe';

/** The bridge table's base chain: node ↔ node frames, at the bridge family's `filter` priority. */
export const BRIDGE_CHAIN = 'walls';
/**
 * Before br_netfilter's hook (NF_BR_PRI_BRNF, 0), which Kubernetes and Docker hosts load: a frame it
 * hands to the IP hooks is re-injected past every bridge chain of priority ≤ 0 it had not run yet.
 */
export const BRIDGE_CHAIN_PRIORITY = -200;

/** A node behind the wall: its port on the bridge and its address. */
export interface WalledNode {
  port: string;
  address: string;
}

const PORT = /^[a-z0-9]{1,15}$/;
const KEY = /^[0-9a-f]{8}_[0-9a-f]{12}$/;
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

/** Names and addresses go into nft's language unquoted or in plain double quotes: only ours pass. */
function check(what: string, value: string, pattern: RegExp): string {
  if (!pattern.test(value)) throw new Error(`firewall: ${what} ${JSON.stringify(value)} is not one the local fleet makes`);
  return value;
}

const runChain = (key: string) => `run_${check('wall key', key, KEY)}`;
const runSet = (key: string) => `nodes_${check('wall key', key, KEY)}`;

/** The tables and their fixed chains, rewritten whole (flush, then add) so any pass leaves them exact. */
export function renderWallBase(bridge: string, portPrefix: string): string[] {
  check('bridge', bridge, PORT);
  check('port prefix', portPrefix, PORT);
  const b = `bridge ${WALL_TABLE}`;
  const i = `inet ${WALL_TABLE}`;
  return [
    `add table ${b}`,
    `add map ${b} ports { type ifname : verdict; }`,
    `add set ${b} wall_ports { type ifname; }`,
    // The chain of Troupe before 2026-12-07, at priority 0, is removed (added first so that its
    // removal works whether or not a machine has it): with br_netfilter loaded, a bridged frame
    // that br_netfilter (also priority 0) has passed through the IP hooks comes back past every
    // bridge chain at priority 0 or below, so that chain let other runs' frames through.
    `add chain ${b} forward { type filter hook forward priority 0; policy accept; }`,
    `flush chain ${b} forward`,
    `delete chain ${b} forward`,
    `add chain ${b} ${BRIDGE_CHAIN} { type filter hook forward priority ${BRIDGE_CHAIN_PRIORITY}; policy accept; }`,
    `flush chain ${b} ${BRIDGE_CHAIN}`,
    `add rule ${b} ${BRIDGE_CHAIN} iifname "${portPrefix}*" ether type arp accept`,
    `add rule ${b} ${BRIDGE_CHAIN} ether type ip iifname vmap @ports`,
    `add rule ${b} ${BRIDGE_CHAIN} iifname @wall_ports drop`,
    `add rule ${b} ${BRIDGE_CHAIN} oifname @wall_ports drop`,
    `add table ${i}`,
    `add chain ${i} input { type filter hook input priority 0; policy accept; }`,
    `flush chain ${i} input`,
    `add rule ${i} input iifname "${bridge}" ct state established,related accept`,
    `add rule ${i} input iifname "${bridge}" drop`,
    `add chain ${i} forward { type filter hook forward priority 0; policy accept; }`,
    `flush chain ${i} forward`,
    // With br_netfilter loaded, frames bridged between two ports pass here too (in and out the bridge): not ours to drop.
    `add rule ${i} forward iifname "${bridge}" oifname != "${bridge}" drop`,
  ];
}

/** The base, the run's chain and set, and `nodes` added to them: one transaction. */
export function renderRunWall(bridge: string, portPrefix: string, key: string, nodes: readonly WalledNode[]): string[] {
  const b = `bridge ${WALL_TABLE}`;
  const lines = [
    ...renderWallBase(bridge, portPrefix),
    `add set ${b} ${runSet(key)} { type ifname . ipv4_addr; }`,
    `add chain ${b} ${runChain(key)}`,
    `flush chain ${b} ${runChain(key)}`,
    `add rule ${b} ${runChain(key)} iifname . ip saddr @${runSet(key)} oifname . ip daddr @${runSet(key)} accept`,
    `add rule ${b} ${runChain(key)} drop`,
  ];
  if (nodes.length === 0) return lines;
  for (const n of nodes) {
    check('port', n.port, PORT);
    check('address', n.address, IPV4);
  }
  // The set first: a port jumps to its run's chain only once its peers are in it.
  lines.push(`add element ${b} ${runSet(key)} { ${nodes.map((n) => `"${n.port}" . ${n.address}`).join(', ')} }`);
  lines.push(`add element ${b} wall_ports { ${nodes.map((n) => `"${n.port}"`).join(', ')} }`);
  lines.push(`add element ${b} ports { ${nodes.map((n) => `"${n.port}" : jump ${runChain(key)}`).join(', ')} }`);
  return lines;
}

/**
 * Takes one node out of its run's wall (a replaced or removed node, once its link is gone): each
 * element added, then deleted, in one transaction, which is how nft deletes what may be gone
 * already. Fails as a whole only when the run's chain or set is gone, i.e. its wall with them.
 */
export function renderNodeRemoval(key: string, node: WalledNode): string[] {
  const b = `bridge ${WALL_TABLE}`;
  const port = `"${check('port', node.port, PORT)}"`;
  const elements = [
    `${runSet(key)} { ${port} . ${check('address', node.address, IPV4)} }`,
    `wall_ports { ${port} }`,
    `ports { ${port} : jump ${runChain(key)} }`,
  ];
  return [...elements.map((e) => `add element ${b} ${e}`), ...elements.map((e) => `delete element ${b} ${e}`)];
}

/** What the table holds of each run: its key and the ports that jump to its chain. */
export type WallListing = Map<string, string[]>;

/** Removes the walls `listing` names (as read just before): their ports, chains and sets. */
export function renderWallRemoval(listing: WallListing): string[] {
  const b = `bridge ${WALL_TABLE}`;
  const lines: string[] = [];
  for (const [key, ports] of listing) {
    if (ports.length > 0) {
      const quoted = ports.map((p) => `"${check('port', p, PORT)}"`).join(', ');
      lines.push(`delete element ${b} ports { ${quoted} }`, `delete element ${b} wall_ports { ${quoted} }`);
    }
    lines.push(`flush chain ${b} ${runChain(key)}`, `delete chain ${b} ${runChain(key)}`, `delete set ${b} ${runSet(key)}`);
  }
  return lines;
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

function field(value: Json | undefined, name: string): Json | undefined {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? value[name] : undefined;
}

/**
 * The walls in `nft -j list table bridge troupe`: a run's key from its chain `run_<key>`, with the
 * ports whose map element jumps there. (A run's chain and set come and go in one transaction.)
 */
export function parseWallListing(json: string): WallListing {
  const listing: WallListing = new Map();
  const items = field(JSON.parse(json) as Json, 'nftables');
  if (!Array.isArray(items)) throw new Error('firewall: `nft -j list table` printed no "nftables" list');
  const keyOf = (name: Json | undefined, prefix: string): string | null => {
    if (typeof name !== 'string' || !name.startsWith(prefix)) return null;
    const key = name.slice(prefix.length);
    return KEY.test(key) ? key : null;
  };
  const entry = (key: string): string[] => {
    let ports = listing.get(key);
    if (!ports) listing.set(key, (ports = []));
    return ports;
  };
  for (const item of items) {
    const chainKey = keyOf(field(field(item, 'chain'), 'name'), 'run_');
    if (chainKey) entry(chainKey);
    const map = field(item, 'map');
    if (field(map, 'name') !== 'ports') continue;
    const elements = field(map, 'elem');
    for (const element of Array.isArray(elements) ? elements : []) {
      if (!Array.isArray(element)) continue;
      const [port, verdict] = element;
      const key = keyOf(field(field(verdict, 'jump'), 'target'), 'run_');
      if (key && typeof port === 'string') entry(key).push(port);
    }
  }
  return listing;
}
