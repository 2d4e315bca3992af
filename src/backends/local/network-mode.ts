import type { NetworkMode } from './instance-store';

/**
 * The network mode a local fleet runs in, from what was asked and what this machine has: netns
 * when asked (or `auto`) and namespaces work, and then only with the firewall (firewall-rules.ts)
 * — no node in a namespace without its wall, and no silent fallback to loopback, whose jobs would
 * reach the machine's services and other runs all the same. Throws one line a user can act on.
 */
export async function chooseNetworkMode(
  wanted: 'netns' | 'loopback' | 'auto',
  netnsAvailable: boolean,
  /** Why nftables cannot be used here (null: it can); asked only when namespaces would be used. */
  firewallMissing: () => Promise<string | null>,
): Promise<NetworkMode> {
  if (wanted === 'loopback') return 'loopback';
  if (wanted === 'netns' && !netnsAvailable) {
    throw new Error('local fleet: network "netns" needs root and a working `ip netns` (use "loopback" or "auto")');
  }
  if (!netnsAvailable) return 'loopback';
  const missing = await firewallMissing();
  if (missing) {
    throw new Error(`local fleet: network namespaces need nftables for the firewall around each run, and ${missing}; install nftables (scripts/setup.sh does)`);
  }
  return 'netns';
}
