import type { GatewayMetrics } from './gateway-metrics';
import { afterProbe, isServing, startStreaks, type ProbeStreaks } from './probe-streaks';
import { fetch as fetchThrough, type Dispatcher } from 'undici';
import type { ReplicaVia, ServiceTable, TableProbe } from './routing-table';

/**
 * Probes after READY (dstack's `until_ready: false`, its default), run by the gateway itself: the data
 * plane decides on its own which replica gets a request, so it does not wait on the run to hear that a
 * replica went bad. Each ready replica of each revision's entry groups — the only replicas the gateway
 * chooses — is probed with each of its table's probes that go on after READY, every `interval_s` after
 * the last probe ended (as dstack schedules them), so a probe of a replica never overlaps itself. The
 * verdicts are the replicas of a service taken out (`onFailing`): a replica is out from a probe's
 * failure until that probe has passed `ready_after` times in a row (probe-streaks.ts).
 */

/**
 * One probe of one replica: whether it passed. `signal` aborts it (the replica or service removed);
 * `dispatcher`: the connections to take (a replica behind a jump host: the data plane's, through its tunnel).
 */
export type ProbeCheck = (origin: string, probe: TableProbe, signal: AbortSignal, dispatcher?: Dispatcher) => Promise<boolean>;

/** A probe's request as written (method, headers, body; redirects not followed) within its timeout, its body read: the answer's status. Rejects when there is no answer. */
export async function probeStatus(origin: string, probe: Pick<TableProbe, 'url' | 'method' | 'headers' | 'body' | 'timeout_s'>, signal?: AbortSignal, dispatcher?: Dispatcher): Promise<number> {
  const headers = probe.headers.map((h): [string, string] => [h.name, h.value]);
  const timeout = AbortSignal.timeout(probe.timeout_s * 1000);
  const init = { method: probe.method.toUpperCase(), headers, body: probe.body, redirect: 'manual' as const, signal: signal ? AbortSignal.any([signal, timeout]) : timeout };
  // undici's own fetch with its dispatcher: Node's global fetch is another copy of undici, which may not take this one's.
  const res = dispatcher ? await fetchThrough(`${origin}${probe.url}`, { ...init, dispatcher }) : await fetch(`${origin}${probe.url}`, init);
  await res.arrayBuffer();
  return res.status;
}

/** Why a request got no answer: undici's cause (`connect ECONNREFUSED …`) rather than fetch's `fetch failed`. */
export function whyNoAnswer(err: unknown): string {
  if (err instanceof Error && err.cause instanceof Error) return err.cause.message;
  return err instanceof Error ? err.message : String(err);
}

/** dstack's test (httpx's `is_success`, redirects not followed): a 2xx answer within the timeout. */
export const httpProbe: ProbeCheck = async (origin, probe, signal, dispatcher) => {
  try {
    const status = await probeStatus(origin, probe, signal, dispatcher);
    return status >= 200 && status < 300;
  } catch {
    return false;
  }
};

interface Loop {
  index: number;
  timer: NodeJS.Timeout | null;
}

/** A ready entry replica under probe. */
interface Target {
  url: string;
  origin: string;
  via: ReplicaVia | undefined;
  labels: { service: string; revision: string; group: string; replica: string };
  streaks: ProbeStreaks;
  loops: Loop[];
  /** Aborts the probes in flight when the replica is no longer probed. */
  stop: AbortController;
}

interface Probed {
  /** The table's probes that go on after READY. */
  probes: TableProbe[];
  /** Their JSON: a table with other probes starts every replica afresh. */
  spec: string;
  targets: Map<string, Target>;
  /** The gauge's label sets last set for this service, by `revision\0group`. */
  gauged: Set<string>;
}

export interface ReplicaProbesOptions {
  metrics: GatewayMetrics;
  /** The URLs of a service's replicas taken out, each time that set changes. */
  onFailing: (run: string, urls: ReadonlySet<string>) => void;
  check?: ProbeCheck;
  /** The connections a probe of a replica behind a jump host takes (the data plane's pool through its tunnel). */
  dispatcherOf?: (origin: string, via: ReplicaVia) => Dispatcher;
}

export class ReplicaProbes {
  private readonly services = new Map<string, Probed>();
  private readonly check: ProbeCheck;
  private closed = false;

  constructor(private readonly options: ReplicaProbesOptions) {
    this.check = options.check ?? httpProbe;
  }

  /** Probes what `table` lists (undefined: the service is gone): starts new replicas' probes, stops removed ones'. */
  sync(run: string, table: ServiceTable | undefined): void {
    if (this.closed) return;
    const probes = table?.probes.filter((p) => !p.until_ready) ?? [];
    const spec = JSON.stringify(probes);
    let probed = this.services.get(run);
    const failingBefore = probed ? this.failing(probed) : new Set<string>();
    if (probed && probed.spec !== spec) {
      for (const target of probed.targets.values()) this.stopTarget(target);
      probed.targets.clear();
    }
    if (probes.length === 0 || !table) {
      if (probed) this.forget(run, probed);
      if (failingBefore.size > 0) this.options.onFailing(run, new Set());
      return;
    }
    if (!probed) {
      probed = { probes, spec, targets: new Map(), gauged: new Set() };
      this.services.set(run, probed);
    }
    probed.probes = probes;
    probed.spec = spec;
    const wanted = readyEntryReplicas(table);
    for (const [url, target] of probed.targets) {
      if (wanted.has(url)) continue;
      this.stopTarget(target);
      probed.targets.delete(url);
    }
    for (const [url, where] of wanted) {
      if (probed.targets.has(url)) continue;
      const target: Target = {
        url,
        origin: new URL(url).origin,
        via: where.via,
        labels: { service: run, revision: String(where.revision), group: where.group, replica: url },
        streaks: startStreaks(probes),
        loops: probes.map((_, index) => ({ index, timer: null })),
        stop: new AbortController(),
      };
      probed.targets.set(url, target);
      // At once: a gateway (re)started beside a failing replica takes it out within one probe.
      for (const loop of target.loops) void this.probe(probed, target, loop);
    }
    this.settle(run, probed, failingBefore);
  }

  /** Stops every probe; no timer is left behind. */
  close(): void {
    this.closed = true;
    for (const [run, probed] of this.services) this.forget(run, probed);
  }

  /** Replicas (by URL) under probe for `run`: what a test of starting and stopping reads. */
  probing(run: string): string[] {
    return [...(this.services.get(run)?.targets.keys() ?? [])];
  }

  private async probe(probed: Probed, target: Target, loop: Loop): Promise<void> {
    loop.timer = null;
    const probe = probed.probes[loop.index] as TableProbe;
    const dispatcher = target.via && this.options.dispatcherOf ? this.options.dispatcherOf(target.origin, target.via) : undefined;
    const passed = await this.check(target.origin, probe, target.stop.signal, dispatcher).catch(() => false);
    if (target.stop.signal.aborted) return;
    if (!passed) this.options.metrics.probeFailures.inc(target.labels);
    const failingBefore = this.failing(probed);
    target.streaks = afterProbe(target.streaks, probed.probes, loop.index, passed);
    this.settle(target.labels.service, probed, failingBefore);
    loop.timer = setTimeout(() => void this.probe(probed, target, loop), probe.interval_s * 1000);
    // The gateway's servers keep it alive; a probe's timer must not keep a stopping one.
    loop.timer.unref();
  }

  private failing(probed: Probed): Set<string> {
    return new Set([...probed.targets.values()].filter((t) => !isServing(t.streaks, probed.probes)).map((t) => t.url));
  }

  /** Says the failing set if it changed, and sets the gauge per revision and group. */
  private settle(run: string, probed: Probed, before: ReadonlySet<string>): void {
    const now = this.failing(probed);
    if (now.size !== before.size || [...now].some((url) => !before.has(url))) this.options.onFailing(run, now);
    const counts = new Map<string, { labels: { service: string; revision: string; group: string }; n: number }>();
    for (const t of probed.targets.values()) {
      const key = `${t.labels.revision}\0${t.labels.group}`;
      const row = counts.get(key) ?? { labels: { service: run, revision: t.labels.revision, group: t.labels.group }, n: 0 };
      if (now.has(t.url)) row.n += 1;
      counts.set(key, row);
    }
    const gauge = this.options.metrics.probesFailing;
    for (const key of probed.gauged) {
      if (counts.has(key)) continue;
      const [revision = '', group = ''] = key.split('\0');
      gauge.remove({ service: run, revision, group });
    }
    for (const { labels, n } of counts.values()) gauge.set(labels, n);
    probed.gauged = new Set(counts.keys());
  }

  private forget(run: string, probed: Probed): void {
    for (const target of probed.targets.values()) this.stopTarget(target);
    probed.targets.clear();
    this.settle(run, probed, new Set());
    this.services.delete(run);
  }

  private stopTarget(target: Target): void {
    target.stop.abort();
    for (const loop of target.loops) {
      if (loop.timer) clearTimeout(loop.timer);
      loop.timer = null;
    }
  }
}

/** Each ready replica of each revision's entry groups, by URL, with where it is listed (the current revision first). */
function readyEntryReplicas(table: ServiceTable): Map<string, { revision: number; group: string; via: ReplicaVia | undefined }> {
  const found = new Map<string, { revision: number; group: string; via: ReplicaVia | undefined }>();
  const revisions = [...table.revisions].sort((a, b) => Number(b.number === table.current_revision) - Number(a.number === table.current_revision));
  for (const revision of revisions) {
    for (const group of revision.groups) {
      if (!revision.entry.includes(group.name)) continue;
      for (const replica of group.replicas) if (replica.state === 'ready' && !found.has(replica.url)) found.set(replica.url, { revision: revision.number, group: group.name, via: replica.via });
    }
  }
  return found;
}
