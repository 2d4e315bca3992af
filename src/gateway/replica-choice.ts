import type { Replica } from './routing-table';

export interface Candidate {
  group: string;
  replica: Replica;
  /** Listed ready, but a probe after READY fails: no new request, as if it were not ready. */
  probesFailing?: boolean;
}

const NONE: ReadonlySet<string> = new Set();

/**
 * The replica a new request goes to: a ready one of the entry groups whose probes pass, the least loaded (fewest requests
 * in flight), ties taken in turn from `turn` so equal replicas share the load round-robin. Where every ready
 * one fails its probes after READY, any ready one (a panic, as Envoy's): probes alone never make the outage
 * they are there to avoid — one failed probe of a service's only router would otherwise refuse every request.
 * `skip`: origins already tried for this request (a connect error).
 */
export function chooseReplica<C extends Candidate>(candidates: readonly C[], inflight: (c: C) => number, turn: number, skip: ReadonlySet<string> = NONE): C | undefined {
  const listed = candidates.filter((c) => c.replica.state === 'ready' && !skip.has(c.replica.url));
  const passing = listed.filter((c) => c.probesFailing !== true);
  const ready = passing.length > 0 ? passing : listed;
  if (ready.length === 0) return undefined;
  let best: C | undefined;
  let bestLoad = Infinity;
  for (let i = 0; i < ready.length; i++) {
    const c = ready[(turn + i) % ready.length] as C;
    const load = inflight(c);
    if (load < bestLoad) {
      best = c;
      bestLoad = load;
    }
  }
  return best;
}

/** A revision as the choice of one sees it. */
export interface RevisionShare {
  /** Percent of new requests. */
  share: number;
  /** Has a ready entry replica. */
  ready: boolean;
}

/**
 * The revision a new request goes to, drawn by share with `roll` in [0, 100). One with nothing ready gives
 * way to the current revision (`entries[0]`), then to the first with a ready replica, so a canary with
 * nothing ready fails no request. undefined: no revision has a ready entry replica.
 */
export function chooseRevision<E extends RevisionShare>(entries: readonly E[], roll: number): E | undefined {
  let left = roll;
  for (const entry of entries) {
    if (left < entry.share) {
      if (entry.ready) return entry;
      break;
    }
    left -= entry.share;
  }
  const current = entries[0];
  return current?.ready ? current : entries.find((e) => e.ready);
}
