import { createHash } from 'node:crypto';
import { resolve } from 'node:path';

/** Names the local fleet derives from a job's identity; all deterministic, so retries find them again. */

function shortHash(text: string, length: number): string {
  return createHash('sha256').update(text).digest('hex').slice(0, length);
}

/**
 * One instance per (run, submission, job, attempt): a retried provision() finds the same one, and a
 * replacement (attempt > 0) gets one of its own. Attempt 0 hashes as ids did before attempts existed.
 */
export function localInstanceId(runId: string, submission: number, jobNum: number, attempt = 0): string {
  const key = attempt ? `${runId}\0${submission}\0${jobNum}\0${attempt}` : `${runId}\0${submission}\0${jobNum}`;
  return `local-${shortHash(key, 16)}`;
}

export interface NodeLinkNames {
  netns: string;
  /** The veth end on the bridge, in the root namespace. */
  hostLink: string;
  /** The veth end inside the node's namespace. */
  nodeLink: string;
}

/** What every node's bridge end is named with (the firewall recognises node ports by it). */
export const HOST_LINK_PREFIX = 'trplh';

/** Link names are at most 15 characters (IFNAMSIZ), hence a 10-hex hash behind a 5-letter prefix. */
export function nodeLinkNames(instanceId: string): NodeLinkNames {
  const h = shortHash(instanceId, 10);
  return { netns: `trpl-${h}`, hostLink: `${HOST_LINK_PREFIX}${h}`, nodeLink: `trpln${h}` };
}

/**
 * The firewall's name for a submission's wall (nftables chain and set names): the fleet (its
 * state directory, so fleets of several workers on one machine never touch each other's walls)
 * and the run, each hashed, so a restarted worker finds them again from its own records.
 */
export function runWallKey(stateDir: string, runId: string, submission: number): string {
  return `${fleetWallPrefix(stateDir)}${shortHash(`${runId}\0${submission}`, 12)}`;
}

/** What every wall key of the fleet kept in `stateDir` starts with (however the directory is spelt). */
export function fleetWallPrefix(stateDir: string): string {
  return `${shortHash(resolve(stateDir), 8)}_`;
}

/** A run id or job name as one safe path component: kept as is when harmless, else sanitised and hashed. */
export function pathSegment(name: string): string {
  if (/^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$/.test(name)) return name;
  const readable = name.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '').slice(0, 60);
  return `${readable}-${shortHash(name, 10)}`;
}

/**
 * A job attempt's cgroup (under CGROUP_PARENT in each hierarchy): the fleet and the instance, so
 * fleets of different state directories on one machine never share one, and the reaper finds its
 * fleet's by the prefix. Nothing in it comes from a job.
 */
export function jobCgroupName(stateDir: string, instanceId: string): string {
  return `${fleetWallPrefix(stateDir)}${instanceId}`;
}
