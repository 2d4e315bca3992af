import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { numberToIp, ipToNumber, parseSubnet, poolAddresses, subnetContains } from '../../src/backends/local/address-pool';
import { localPool } from '../../src/backends/local/local-backend';
import { claimDefaultSubnet, preferredBucket } from '../../src/backends/local/subnet-claims';
import { localInstanceId, nodeLinkNames, pathSegment } from '../../src/backends/local/local-names';

describe('local fleet addresses', () => {
  it('converts addresses both ways', () => {
    expect(ipToNumber('10.213.1.2')).toBe(10 * 2 ** 24 + 213 * 2 ** 16 + 258);
    expect(numberToIp(ipToNumber('255.255.255.255'))).toBe('255.255.255.255');
    expect(() => ipToNumber('10.213.1')).toThrow('not an IPv4 address');
    expect(() => ipToNumber('10.213.1.256')).toThrow('not an IPv4 address');
  });

  it('parses subnets and refuses host bits', () => {
    expect(parseSubnet('10.213.0.0/16')).toEqual({ base: ipToNumber('10.213.0.0'), prefix: 16 });
    expect(() => parseSubnet('10.213.0.1/16')).toThrow('host bits');
    expect(() => parseSubnet('10.213.0.0')).toThrow('a.b.c.d/prefix');
    expect(() => parseSubnet('10.0.0.0/31')).toThrow('between 8 and 30');
    expect(subnetContains(parseSubnet('10.213.0.0/16'), parseSubnet('10.213.250.0/24'))).toBe(true);
    expect(subnetContains(parseSubnet('10.213.0.0/16'), parseSubnet('10.214.0.0/24'))).toBe(false);
    expect(subnetContains(parseSubnet('10.213.0.0/16'), parseSubnet('10.212.0.0/15'))).toBe(false);
  });

  it('hands out hosts in order, without network, broadcast or reserved addresses, up to the capacity', () => {
    const pool = poolAddresses(parseSubnet('10.213.0.0/29'), ['10.213.0.1'], null);
    expect(pool).toEqual(['10.213.0.2', '10.213.0.3', '10.213.0.4', '10.213.0.5', '10.213.0.6']);
    expect(poolAddresses(parseSubnet('10.213.0.0/16'), ['10.213.0.1'], 2)).toEqual(['10.213.0.2', '10.213.0.3']);
    expect(poolAddresses(parseSubnet('10.213.0.0/16'), [], 0)).toEqual([]);
  });
});

describe('default subnet of a fleet', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'troupe-subnets-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));
  let case_ = 0;
  /** A fresh machine: a claims directory of its own, and state directories under it. */
  function machine() {
    case_ += 1;
    const root = join(scratch, `m${case_}`);
    const claims = join(root, 'claims');
    const state = (name: string) => {
      mkdirSync(join(root, name), { recursive: true });
      return join(root, name);
    };
    return { claims, state };
  }

  it('is a /22 (1,022 nodes) of 10.213.4-199 (netns) or 127.213.4-199 (loopback), first chosen by the state directory', () => {
    const m = machine();
    const dirs = Array.from({ length: 40 }, (_, i) => m.state(`state-${i}`));
    for (const dir of dirs) {
      const netns = claimDefaultSubnet('netns', dir, m.claims);
      expect(netns).toMatch(/^10\.213\.(\d+)\.0\/22$/);
      const third = Number(netns.split('.')[2]);
      expect(third).toBeGreaterThanOrEqual(4);
      expect(third + 3).toBeLessThanOrEqual(199);
      expect(localPool('netns', netns, null)).toHaveLength(1022);
      expect(localPool('loopback', claimDefaultSubnet('loopback', dir, m.claims), null)).toHaveLength(1022);
      // The same fleet (another of its processes, a restart, a path with a trailing slash) gets the same.
      expect(claimDefaultSubnet('netns', `${dir}/`, m.claims)).toBe(netns);
    }
    // No two live fleets of one machine share one: 40 fleets, 40 subnets.
    expect(new Set(dirs.map((d) => claimDefaultSubnet('netns', d, m.claims))).size).toBe(40);
  });

  it("passes over a bucket another live fleet holds, takes over one whose fleet is gone, and keeps its choice", () => {
    const m = machine();
    const a = m.state('a');
    const first = claimDefaultSubnet('netns', a, m.claims);
    // A fleet whose first choice is a's bucket: found among many names.
    const rival = Array.from({ length: 2000 }, (_, i) => `rival-${i}`).find((n) => preferredBucket(join(m.claims, '..', n)) === preferredBucket(a));
    expect(rival).toBeDefined();
    const b = m.state(rival as string);
    const second = claimDefaultSubnet('netns', b, m.claims);
    expect(second).not.toBe(first);
    expect(Number(second.split('.')[2])).toBe((Number(first.split('.')[2]) % 196) + 4);
    // a's state directory gone (its fleet removed): a new rival takes the bucket over.
    rmSync(a, { recursive: true });
    const third = Array.from({ length: 2000 }, (_, i) => `again-${i}`).find((n) => preferredBucket(join(m.claims, '..', n)) === preferredBucket(b));
    const d = m.state(third as string);
    expect(claimDefaultSubnet('netns', d, m.claims)).toBe(first);
    // b keeps its subnet across its restarts, whatever was freed meanwhile.
    expect(claimDefaultSubnet('netns', b, m.claims)).toBe(second);
    expect(readFileSync(join(b, 'subnet-netns'), 'utf8').trim()).toBe(second);
    expect(existsSync(join(m.claims, `netns-${preferredBucket(b)}`))).toBe(true);
  });

  it('takes a subnet and capacity of the user, inside the mode\'s range', () => {
    expect(localPool('loopback', '127.214.0.0/20', null)).toHaveLength(4094);
    expect(localPool('loopback', '127.214.0.0/20', 1000)).toHaveLength(1000);
    expect(localPool('netns', '10.213.0.0/16', null)).not.toContain('10.213.0.1');
    expect(() => localPool('netns', '10.214.0.0/22', null)).toThrow('must lie inside 10.213.0.0/16 in netns mode');
    expect(() => localPool('loopback', '10.213.4.0/22', null)).toThrow('must lie inside 127.0.0.0/8');
  });
});

describe('local fleet names', () => {
  it('derives one instance per (run, submission, job)', () => {
    const id = localInstanceId('run-a', 0, 1);
    expect(localInstanceId('run-a', 0, 1)).toBe(id);
    expect(new Set([id, localInstanceId('run-a', 1, 1), localInstanceId('run-a', 0, 2), localInstanceId('run-b', 0, 1)]).size).toBe(4);
  });

  it('gives every attempt of a job its own instance, attempt 0 the one it had before attempts', () => {
    expect(localInstanceId('run-a', 0, 1, 0)).toBe(localInstanceId('run-a', 0, 1));
    expect(localInstanceId('run-a', 0, 1)).toBe('local-73447bc3575ef66c');
    const attempts = [1, 2, 3].map((k) => localInstanceId('run-a', 0, 1, k));
    expect(new Set([localInstanceId('run-a', 0, 1), ...attempts]).size).toBe(4);
    expect(localInstanceId('run-a', 0, 1, 2)).toBe(attempts[1]);
  });

  it('keeps link names within 15 characters', () => {
    const names = nodeLinkNames(localInstanceId('a-very-long-run-name-that-goes-on', 12, 345));
    for (const name of [names.netns, names.hostLink, names.nodeLink]) expect(name.length).toBeLessThanOrEqual(15);
    expect(names.netns).toMatch(/^trpl-[0-9a-f]{10}$/);
  });

  it('turns any run id into one safe path component', () => {
    expect(pathSegment('pd-disagg-0-0')).toBe('pd-disagg-0-0');
    for (const hostile of ['..', '.', 'a/b', '../../etc', '', 'x'.repeat(300)]) {
      const segment = pathSegment(hostile);
      expect(segment).not.toContain('/');
      expect(segment.startsWith('.')).toBe(false);
      expect(segment.length).toBeGreaterThan(0);
      expect(segment.length).toBeLessThanOrEqual(100);
    }
    expect(pathSegment('a/b')).not.toBe(pathSegment('a_b'));
  });
});
