import { describe, expect, it } from 'vitest';
import { chooseNetworkMode } from '../../src/backends/local/network-mode';

const missing = async () => '`nft` is not installed';
const present = async () => null;
const unasked = async (): Promise<string | null> => {
  throw new Error('nftables asked about in a mode without namespaces');
};

describe('local network mode and the firewall', () => {
  it('uses namespaces only with nftables, asked or by default', async () => {
    expect(await chooseNetworkMode('netns', true, present)).toBe('netns');
    expect(await chooseNetworkMode('auto', true, present)).toBe('netns');
  });

  it('refuses namespaces without nftables in one line, never falling back to loopback in silence', async () => {
    for (const wanted of ['netns', 'auto'] as const) {
      const refused = chooseNetworkMode(wanted, true, missing);
      await expect(refused).rejects.toThrow(/^local fleet: network namespaces need nftables for the firewall around each run, and `nft` is not installed; install nftables/);
      await expect(refused).rejects.not.toThrow('\n');
    }
  });

  it('does not ask for nftables where no namespace is used', async () => {
    expect(await chooseNetworkMode('loopback', true, unasked)).toBe('loopback');
    expect(await chooseNetworkMode('auto', false, unasked)).toBe('loopback');
    await expect(chooseNetworkMode('netns', false, unasked)).rejects.toThrow('needs root');
  });
});
