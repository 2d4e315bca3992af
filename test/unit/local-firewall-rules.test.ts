import { describe, expect, it } from 'vitest';
import { parseWallListing, renderNodeRemoval, renderRunWall, renderWallBase, renderWallRemoval } from '../../src/backends/local/firewall-rules';
import { fleetWallPrefix, runWallKey } from '../../src/backends/local/local-names';

const KEY = runWallKey('/var/lib/troupe/local', 'run-a', 1);

describe('local firewall rules', () => {
  it('names a wall by its fleet and its submission, the same every time', () => {
    expect(KEY).toMatch(/^[0-9a-f]{8}_[0-9a-f]{12}$/);
    expect(runWallKey('/var/lib/troupe/local', 'run-a', 1)).toBe(KEY);
    expect(runWallKey('/var/lib/troupe/local', 'run-a', 2)).not.toBe(KEY);
    expect(runWallKey('/tmp/other', 'run-a', 1)).not.toBe(KEY);
    expect(runWallKey('/var/lib/troupe/./local/', 'run-a', 1)).toBe(KEY);
    expect(KEY.startsWith(fleetWallPrefix('/var/lib/troupe/local'))).toBe(true);
  });

  it('renders the base: ARP and a run chain per node port, nothing from the bridge into the machine', () => {
    const base = renderWallBase('trpl0', 'trplh');
    expect(base).toContain('add rule bridge troupe walls iifname "trplh*" ether type arp accept');
    expect(base).toContain('add rule bridge troupe walls ether type ip iifname vmap @ports');
    expect(base).toContain('add rule bridge troupe walls iifname @wall_ports drop');
    // Before br_netfilter's hook (priority 0), and the chain of an earlier Troupe at 0 removed.
    expect(base).toContain('add chain bridge troupe walls { type filter hook forward priority -200; policy accept; }');
    expect(base.slice(base.indexOf('add chain bridge troupe forward { type filter hook forward priority 0; policy accept; }'))).toContain('delete chain bridge troupe forward');
    expect(base.some((l) => l.startsWith('add rule bridge troupe forward '))).toBe(false);
    expect(base).toContain('add rule inet troupe input iifname "trpl0" ct state established,related accept');
    expect(base).toContain('add rule inet troupe input iifname "trpl0" drop');
    // Each fixed chain is flushed before its rules: a second pass leaves one copy of each.
    for (const chain of ['bridge troupe walls', 'inet troupe input', 'inet troupe forward']) {
      const flush = base.indexOf(`flush chain ${chain}`);
      expect(flush).toBeGreaterThan(-1);
      expect(base.findIndex((l) => l.startsWith(`add rule ${chain} `))).toBeGreaterThan(flush);
    }
  });

  it("renders a run's wall: its nodes' ports jump to its chain, which lets out only toward its own ports", () => {
    const lines = renderRunWall('trpl0', 'trplh', KEY, [
      { port: 'trplh0123456789', address: '10.213.0.5' },
      { port: 'trplhabcdefabcd', address: '10.213.0.6' },
    ]);
    expect(lines).toEqual(expect.arrayContaining([
      `add set bridge troupe nodes_${KEY} { type ifname . ipv4_addr; }`,
      `add rule bridge troupe run_${KEY} iifname . ip saddr @nodes_${KEY} oifname . ip daddr @nodes_${KEY} accept`,
      `add rule bridge troupe run_${KEY} drop`,
      `add element bridge troupe nodes_${KEY} { "trplh0123456789" . 10.213.0.5, "trplhabcdefabcd" . 10.213.0.6 }`,
      `add element bridge troupe ports { "trplh0123456789" : jump run_${KEY}, "trplhabcdefabcd" : jump run_${KEY} }`,
    ]));
    // The peers are in the set before a port jumps to the chain that reads it.
    expect(lines.findIndex((l) => l.includes(`nodes_${KEY} {`) && l.startsWith('add element'))).toBeLessThan(lines.findIndex((l) => l.includes('ports {') && l.startsWith('add element')));
    // A whole batch is one transaction of a fixed number of lines, however many nodes.
    const many = Array.from({ length: 1000 }, (_, i) => ({ port: `trplh${i.toString(16).padStart(10, '0')}`, address: `10.213.${i >> 7}.${(i & 127) + 1}` }));
    expect(renderRunWall('trpl0', 'trplh', KEY, many)).toHaveLength(lines.length);
  });

  it('takes one node out of its wall whether or not it is still in it (add, then delete, in one transaction)', () => {
    const lines = renderNodeRemoval(KEY, { port: 'trplh01', address: '10.213.0.5' });
    expect(lines).toEqual([
      `add element bridge troupe nodes_${KEY} { "trplh01" . 10.213.0.5 }`,
      'add element bridge troupe wall_ports { "trplh01" }',
      `add element bridge troupe ports { "trplh01" : jump run_${KEY} }`,
      `delete element bridge troupe nodes_${KEY} { "trplh01" . 10.213.0.5 }`,
      'delete element bridge troupe wall_ports { "trplh01" }',
      `delete element bridge troupe ports { "trplh01" : jump run_${KEY} }`,
    ]);
  });

  it('refuses names and addresses the fleet does not make (nothing reaches nft unchecked)', () => {
    expect(() => renderRunWall('trpl0', 'trplh', KEY, [{ port: 'x" accept #', address: '10.213.0.5' }])).toThrow('firewall: port');
    expect(() => renderRunWall('trpl0', 'trplh', KEY, [{ port: 'trplh01', address: '10.213.0.256' }])).toThrow('firewall: address');
    expect(() => renderRunWall('trpl0', 'trplh', 'run; flush ruleset', [])).toThrow('firewall: wall key');
  });

  it('reads the walls back from `nft -j` and removes exactly them', () => {
    const other = runWallKey('/var/lib/troupe/local', 'run-b', 1);
    const json = JSON.stringify({
      nftables: [
        { metainfo: { version: '1.0.6' } },
        { table: { family: 'bridge', name: 'troupe' } },
        { map: { name: 'ports', elem: [['trplh01', { jump: { target: `run_${KEY}` } }], ['trplh02', { jump: { target: `run_${other}` } }]] } },
        { chain: { name: 'forward' } },
        { chain: { name: `run_${KEY}` } },
        { chain: { name: `run_${other}` } },
        { chain: { name: 'run_not-ours' } },
      ],
    });
    const listing = parseWallListing(json);
    expect(listing).toEqual(new Map([[KEY, ['trplh01']], [other, ['trplh02']]]));
    expect(renderWallRemoval(new Map([[KEY, ['trplh01']]]))).toEqual([
      'delete element bridge troupe ports { "trplh01" }',
      'delete element bridge troupe wall_ports { "trplh01" }',
      `flush chain bridge troupe run_${KEY}`,
      `delete chain bridge troupe run_${KEY}`,
      `delete set bridge troupe nodes_${KEY}`,
    ]);
    // A wall whose nodes were all removed: its chain and set only.
    expect(renderWallRemoval(new Map([[KEY, []]]))).toHaveLength(3);
  });
});
