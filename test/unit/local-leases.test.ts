import { mkdtemp, readdir, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InstanceStore, type Lease } from '../../src/backends/local/instance-store';
import { localPool } from '../../src/backends/local/local-backend';

const owner = (i: number, run = 'run-a'): Lease => ({ instance_id: `inst-${run}-${i}`, run_id: run, submission: 0 });

describe('leasing a batch of addresses', () => {
  let dir: string;
  let store: InstanceStore;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'troupe-leases-'));
    store = new InstanceStore(dir);
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('gives every instance of a batch its own address, in pool order, skipping held ones', async () => {
    const pool = localPool('loopback', '127.250.0.0/24', null);
    const first = await store.leaseAddresses([owner(0, 'other')], pool);
    expect(first?.get('inst-other-0')).toBe('127.250.0.1');
    const batch = await store.leaseAddresses([0, 1, 2].map((i) => owner(i)), pool);
    expect([...(batch?.values() ?? [])]).toEqual(['127.250.0.2', '127.250.0.3', '127.250.0.4']);
    expect(await store.freeAddresses(pool)).toBe(pool.length - 4);
  });

  it('gives an instance the address it leased before (a provision that died before its record)', async () => {
    const pool = localPool('loopback', '127.250.0.0/24', null);
    const before = await store.leaseAddresses([owner(1)], pool);
    const again = await store.leaseAddresses([owner(0), owner(1), owner(2)], pool);
    expect(again?.get('inst-run-a-1')).toBe(before?.get('inst-run-a-1'));
    expect(new Set(again?.values()).size).toBe(3);
    expect(await store.freeAddresses(pool)).toBe(pool.length - 3);
  });

  it('is all or nothing: a batch larger than the free addresses takes none', async () => {
    const pool = localPool('loopback', '127.250.0.0/24', 5);
    await store.leaseAddresses([owner(0, 'other'), owner(1, 'other')], pool);
    expect(await store.leaseAddresses([0, 1, 2, 3].map((i) => owner(i)), pool)).toBeNull();
    expect(await store.freeAddresses(pool)).toBe(3);
    expect((await store.leaseAddresses([0, 1, 2].map((i) => owner(i)), pool))?.size).toBe(3);
    expect(await store.freeAddresses(pool)).toBe(0);
  });

  it('never hands out an address another process leased meanwhile', async () => {
    const pool = localPool('loopback', '127.250.0.0/24', null);
    // Two stores (two worker processes) lease at once from one state directory.
    const other = new InstanceStore(dir);
    const [a, b] = await Promise.all([
      store.leaseAddresses(Array.from({ length: 50 }, (_, i) => owner(i, 'a')), pool),
      other.leaseAddresses(Array.from({ length: 50 }, (_, i) => owner(i, 'b')), pool),
    ]);
    const all = [...(a?.values() ?? []), ...(b?.values() ?? [])];
    expect(all).toHaveLength(100);
    expect(new Set(all).size).toBe(100);
    expect(await readdir(join(dir, 'leases'))).toHaveLength(100);
  });

  it('reads the lease files once per batch, whatever its size', async () => {
    const pool = localPool('loopback', '127.216.0.0/20', null);
    // A thousand held addresses: one pass is a few hundred ms at most; one pass per instance took tens of seconds.
    await mkdir(join(dir, 'leases'), { recursive: true });
    await Promise.all(pool.slice(0, 1000).map((ip, i) => writeFile(join(dir, 'leases', ip), `${JSON.stringify(owner(i, 'held'))}\n`)));
    const started = Date.now();
    const batch = await store.leaseAddresses(Array.from({ length: 1000 }, (_, i) => owner(i)), pool);
    const took = Date.now() - started;
    expect(batch?.size).toBe(1000);
    expect(new Set(batch?.values()).size).toBe(1000);
    expect(batch?.get('inst-run-a-0')).toBe(pool[1000]);
    expect(took).toBeLessThan(5_000);
  });
});
