import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import type { NetworkMode } from './instance-store';
import { isErrno } from './state-files';

/**
 * The default subnet of a local fleet, one per state directory and none shared on a machine.
 *
 * A fleet's leases live in its state directory, so two fleets with different state directories
 * (two workers of different users, a worker and a test run) that hand out the same addresses put
 * two nodes with one address on the same bridge: the ARP answer of one reaches the other's peers,
 * whose packets then go to a node the wall drops them at. Picked from a hash of the state
 * directory alone, two fleets met in one of 49 cases. So a fleet claims its /22 on the machine:
 *
 * - its first choice is the bucket its state directory hashes to; a bucket another fleet holds is
 *   passed over for the next one; a claim whose state directory is gone is taken over;
 * - the choice is kept in the state directory (`subnet-<mode>`): a fleet keeps its addresses across
 *   restarts and across its worker processes, whatever was claimed meanwhile;
 * - claims are files named by mode and bucket in a directory of the machine that outlives a reboot
 *   (`/var/lib/troupe/local-subnets` as root; the user's `~/.troupe/local-subnets` otherwise),
 *   made with O_EXCL, so two fleets starting at once never take the same bucket.
 */

/** N of 10.213.N.0/22 and 127.213.N.0/22: 4, 8, … 196 (200..255 stay free for explicit subnets). */
const BUCKETS = 49;

function bucketSubnet(mode: NetworkMode, bucket: number): string {
  const n = 4 * (1 + bucket);
  return mode === 'netns' ? `10.213.${n}.0/22` : `127.213.${n}.0/22`;
}

/** The bucket a state directory hashes to (its first choice). */
export function preferredBucket(stateDir: string): number {
  return createHash('sha256').update(resolve(stateDir)).digest().readUInt32BE(0) % BUCKETS;
}

/** Where this machine's claims are. */
export function defaultClaimsDir(): string {
  return process.getuid?.() === 0 ? '/var/lib/troupe/local-subnets' : join(homedir(), '.troupe', 'local-subnets');
}

function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null;
    throw err;
  }
}

/** Takes `file` for `owner` if it is free, already `owner`'s, or held for a state directory that is gone. */
function tryClaim(file: string, owner: string): boolean {
  try {
    writeFileSync(file, `${owner}\n`, { flag: 'wx', mode: 0o644 });
    return true;
  } catch (err) {
    if (!isErrno(err, 'EEXIST')) throw err;
  }
  const holder = readText(file);
  if (holder === owner) return true;
  if (holder !== null && holder !== '' && existsSync(holder)) return false;
  // Stale (its fleet's state directory is gone) or half-written: taken over in one rename.
  const temp = `${file}.${process.pid}.${Date.now()}`;
  writeFileSync(temp, `${owner}\n`, { mode: 0o644 });
  renameSync(temp, file);
  return readText(file) === owner;
}

/**
 * The fleet's subnet in `mode`: the one its state directory keeps, else the first bucket from its
 * hash that no other live fleet of this machine holds (then kept). Throws when all 49 are held.
 */
export function claimDefaultSubnet(mode: NetworkMode, stateDir: string, claimsDir = defaultClaimsDir()): string {
  const owner = resolve(stateDir);
  const kept = join(owner, `subnet-${mode}`);
  const known = readText(kept);
  mkdirSync(claimsDir, { recursive: true, mode: 0o755 });
  const start = preferredBucket(owner);
  const buckets = known !== null ? [...Array(BUCKETS).keys()].filter((b) => bucketSubnet(mode, b) === known) : [];
  // A kept subnet is claimed again (a machine whose claims were lost), whoever claimed it meanwhile.
  if (buckets.length === 1) {
    tryClaim(join(claimsDir, `${mode}-${buckets[0]}`), owner);
    return known as string;
  }
  if (known !== null) return known;
  for (let i = 0; i < BUCKETS; i += 1) {
    const bucket = (start + i) % BUCKETS;
    if (tryClaim(join(claimsDir, `${mode}-${bucket}`), owner)) {
      const subnet = bucketSubnet(mode, bucket);
      mkdirSync(owner, { recursive: true });
      writeFileSync(kept, `${subnet}\n`, { mode: 0o644 });
      return subnet;
    }
  }
  throw new Error(
    `local fleet: all ${BUCKETS} default subnets of ${mode} mode are held by other fleets of this machine (${claimsDir}); give this one --local-subnet`,
  );
}
