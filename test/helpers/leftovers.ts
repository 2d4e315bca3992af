import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { stopRunSignal } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { processGroupMembers } from './local-fleet';

/** What a local-fleet run left on this machine after its end (all zero when teardown did its job). */
export interface Leftovers {
  processes: number;
  namespaces: number;
  leases: number;
  instances: number;
}

/** Live processes that carry one of the run's instance markers (they may have left their group). */
function markedProcesses(instanceIds: readonly string[]): number[] {
  const markers = instanceIds.map((id) => `TROUPE_INSTANCE_ID=${id}`);
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const environ = readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0');
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const zombie = stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
      if (!zombie && environ.some((v) => markers.includes(v))) found.push(Number(entry));
    } catch {
      // gone, or not ours to read
    }
  }
  return found;
}

function filesMentioning(dir: string, text: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((f) => {
    try {
      return readFileSync(join(dir, f), 'utf8').includes(text);
    } catch {
      return false;
    }
  });
}

/** `fleetDir`: the local backend's state directory (its `leases/` and `instances/`). */
export function leftovers(state: RunState | null, fleetDir: string): Leftovers {
  if (!state) return { processes: 0, namespaces: 0, leases: 0, instances: 0 };
  const pids = new Set<number>();
  for (const job of state.jobs) if (job.pid !== null) for (const p of processGroupMembers(job.pid)) pids.add(p);
  // Every machine the run had: a node's earlier attempts (replaced, or its rank taken again after a resize) as well.
  const machines = state.jobs.flatMap((j) => [j.instance, ...j.previous_attempts.map((a) => a.instance)]).flatMap((i) => (i ? [i] : []));
  for (const p of markedProcesses(machines.map((i) => i.instance_id))) pids.add(p);
  const namespaces = machines.filter((i) => {
    const netns = i.details?.netns;
    return netns !== undefined && existsSync(`/run/netns/${netns}`);
  }).length;
  return {
    processes: pids.size,
    namespaces,
    leases: filesMentioning(join(fleetDir, 'leases'), state.run_uid).length,
    instances: filesMentioning(join(fleetDir, 'instances'), state.run_uid).length,
  };
}

/** A run stopped gracefully (`troupe stop`): it ends TERMINATED and leaves nothing on this machine. */
export async function stopLeavingNothing(handle: { signal: (s: typeof stopRunSignal, arg: { abort: boolean }) => Promise<void>; result: () => Promise<RunState> }, fleetDir: string): Promise<RunState> {
  await handle.signal(stopRunSignal, { abort: false });
  const final = await handle.result();
  expect(final.status).toBe('TERMINATED');
  expect(leftovers(final, fleetDir)).toEqual({ processes: 0, namespaces: 0, leases: 0, instances: 0 });
  return final;
}
