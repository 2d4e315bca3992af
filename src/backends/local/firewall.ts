import { HOST_LINK_PREFIX } from './local-names';
import { BRIDGE } from './netns';
import { parseWallListing, renderNodeRemoval, renderRunWall, renderWallRemoval, WALL_TABLE, type WalledNode, type WallListing } from './firewall-rules';
import { spawner, type CommandResult } from './spawner';

/**
 * Applies the local fleet's firewall (firewall-rules.ts) with nftables: one `nft` process per
 * change, its text on standard input (a shell's printf, since the spawner closes stdin), so a
 * change is one atomic transaction and a batch of any size costs one process.
 */

/** Lines as arguments (each well under the kernel's 128 KiB per argument, all of them under ARG_MAX). */
function nft(lines: readonly string[]): Promise<CommandResult> {
  return spawner.run('sh', ['-c', `printf '%s\\n' "$@" | nft -f -`, 'nft', ...lines]);
}

/** Null when nftables answers here, else why not (one line). */
export async function firewallUnavailable(): Promise<string | null> {
  const r = await spawner.run('sh', ['-c', 'command -v nft >/dev/null || exit 127; exec nft list tables']);
  if (r.code === 0) return null;
  return r.code === 127 ? '`nft` is not installed' : `\`nft list tables\` failed: ${firstLine(r)}`;
}

/** The run's wall (created when missing) around `nodes` too. */
export async function addToRunWall(key: string, nodes: readonly WalledNode[]): Promise<void> {
  const r = await nft(renderRunWall(BRIDGE, HOST_LINK_PREFIX, key, nodes));
  if (r.code !== 0) throw new Error(`firewall: adding ${nodes.length} node(s) to wall ${key} failed: ${firstLine(r)}`);
}

/** Takes one node out of its run's wall; nothing to do when the wall is gone already. */
export async function removeFromRunWall(key: string, node: WalledNode): Promise<void> {
  const r = await nft(renderNodeRemoval(key, node));
  if (r.code === 0 || !(await listWalls()).has(key)) return;
  throw new Error(`firewall: removing ${node.port} from wall ${key} failed: ${firstLine(r)}`);
}

async function listWalls(): Promise<WallListing> {
  const r = await spawner.run('nft', ['-j', 'list', 'table', 'bridge', WALL_TABLE]);
  if (r.code !== 0) {
    if (/No such file or directory/.test(r.stderr)) return new Map();
    throw new Error(`firewall: listing table bridge ${WALL_TABLE} failed: ${firstLine(r)}`);
  }
  return parseWallListing(r.stdout);
}

/**
 * Removes every wall whose key `choose` (asked after the listing, so what it reads is no older
 * than the walls) picks, as the table holds them now: two processes (list, then one transaction).
 * Another worker removing the same wall at once makes the transaction fail as a whole (an element
 * already gone): it is listed and tried again.
 */
export async function removeWalls(choose: () => Promise<(key: string) => boolean>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const walls = await listWalls();
    if (walls.size === 0) return;
    const remove = await choose();
    const listing = new Map([...walls].filter(([key]) => remove(key)));
    if (listing.size === 0) return;
    const r = await nft(renderWallRemoval(listing));
    if (r.code === 0) return;
    if (attempt >= 4) throw new Error(`firewall: removing wall(s) ${[...listing.keys()].join(', ')} failed: ${firstLine(r)}`);
    await new Promise((done) => setTimeout(done, 50 * attempt));
  }
}

function firstLine(r: CommandResult): string {
  return r.stderr.trim().split('\n')[0] || `exit ${r.code}`;
}
