/**
 * One ready replica's probes after READY, as dstack counts them: each probe's passes in a row (its
 * `success_streak`), a failure setting it back to 0. The replica serves while every probe's streak has
 * reached its `ready_after`; a failure takes it out, `ready_after` passes in a row bring it back.
 */

/** Per probe, in the order of the probes given: passes in a row, kept no higher than its `ready_after`. */
export type ProbeStreaks = readonly number[];

interface ReadyAfter {
  ready_after: number;
}

/** A replica listed ready has passed its probes already (READY came after them): it starts serving. */
export function startStreaks(probes: readonly ReadyAfter[]): ProbeStreaks {
  return probes.map((p) => p.ready_after);
}

/** The streaks after probe `index` passed or failed. */
export function afterProbe(streaks: ProbeStreaks, probes: readonly ReadyAfter[], index: number, passed: boolean): ProbeStreaks {
  const probe = probes[index];
  if (probe === undefined || streaks.length !== probes.length) throw new Error(`probe ${index} of ${probes.length} (${streaks.length} streaks): not one of the replica's probes`);
  return streaks.map((s, i) => (i !== index ? s : passed ? Math.min(s + 1, probe.ready_after) : 0));
}

/** Whether new requests may go to the replica: every probe has passed `ready_after` times in a row. */
export function isServing(streaks: ProbeStreaks, probes: readonly ReadyAfter[]): boolean {
  return probes.every((p, i) => (streaks[i] ?? 0) >= p.ready_after);
}
