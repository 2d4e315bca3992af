import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalBackend, type LocalBackendOptions } from '../../src/backends/local/local-backend';

/** A local fleet in a temporary state directory, removed (with every run's files) at the end. */
export function makeLocalFleet(prefix = 'troupe-local-', options: Partial<LocalBackendOptions> = {}) {
  const stateDir = mkdtempSync(join(tmpdir(), prefix));
  const backend = new LocalBackend({ stateDir, network: 'auto', ...options });
  return { stateDir, backend, remove: () => rmSync(stateDir, { recursive: true, force: true }) };
}

/**
 * A folder the test's jobs write into (they run on this machine, so they can share it). Open to
 * everyone: as root, each run's jobs run as a user of its own.
 */
/**
 * A new directory a test shares with its jobs: under /var/tmp, not the machine's /tmp, which an
 * isolated node does not see (it has a /tmp of its own, as a machine has).
 */
export function jobVisibleTempDir(prefix: string): string {
  return mkdtempSync(join('/var/tmp', prefix));
}

export function makeSharedDir(prefix = 'troupe-shared-') {
  const dir = jobVisibleTempDir(prefix);
  chmodSync(dir, 0o1777);
  return {
    dir,
    lines: (name: string): string[] =>
      existsSync(join(dir, name)) ? readFileSync(join(dir, name), 'utf8').split('\n').filter(Boolean) : [],
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Every live pid in the process group led by `pgid` (our jobs run in their own group via setsid).
 * Zombies are left out: they have ended and only wait for their parent to reap them.
 */
export function processGroupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === pgid && fields[0] !== 'Z') members.push(Number(entry));
    } catch {
      // the process ended while we looked
    }
  }
  return members;
}
