import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** From a cached answer on the same host to a long LLM completion. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

type Labels = 'service' | 'revision' | 'group' | 'replica';
type LabelValues = Record<Labels, string>;

/**
 * One replica's (or one service's refusals') metrics, its label objects made once: prom-client still
 * hashes them on each update, but the data plane no longer builds and spreads them per request.
 */
export class ReplicaMetrics {
  private readonly byCode = new Map<number, LabelValues & { code: string }>();
  private readonly byReason = new Map<string, LabelValues & { reason: string }>();

  constructor(
    private readonly metrics: GatewayMetrics,
    /** The in-flight key of the replica (`GatewayServices`), or a service's for its refusals. */
    readonly key: string,
    readonly labels: LabelValues,
  ) {}

  answered(status: number): void {
    let labels = this.byCode.get(status);
    if (!labels) {
      labels = { ...this.labels, code: String(status) };
      this.byCode.set(status, labels);
    }
    this.metrics.requests.inc(labels);
  }

  failed(reason: string): void {
    let labels = this.byReason.get(reason);
    if (!labels) {
      labels = { ...this.labels, reason };
      this.byReason.set(reason, labels);
    }
    this.metrics.errors.inc(labels);
  }

  firstByte(seconds: number): void {
    this.metrics.firstByte.observe(this.labels, seconds);
  }

  ended(seconds: number): void {
    this.metrics.latency.observe(this.labels, seconds);
  }
}

/**
 * The gateway's metrics, per service, revision, group and replica. A request refused before it
 * reached a replica (401, 403, 429, 503) counts with empty group and replica.
 */
export class GatewayMetrics {
  readonly registry = new Registry();
  readonly requests: Counter<Labels | 'code'>;
  readonly errors: Counter<Labels | 'reason'>;
  /** Request received → response ended (for a stream, its whole length). */
  readonly latency: Histogram<Labels>;
  /** Request received → response headers sent by the replica. */
  readonly firstByte: Histogram<Labels>;
  readonly inflight: Gauge<Labels>;
  /** Probes after READY that failed (an error, a timeout, an answer other than 2xx), per replica. */
  readonly probeFailures: Counter<Labels>;
  /** Ready replicas given no new request because a probe after READY fails. */
  readonly probesFailing: Gauge<Exclude<Labels, 'replica'>>;
  /** By label key: as many as prom-client itself keeps label sets for (it forgets none either). */
  private readonly replicas = new Map<string, ReplicaMetrics>();

  /**
   * `inflightOf`: the requests in flight to a replica by its key. The gauge is read from it when scraped,
   * not set twice on every request.
   */
  constructor(inflightOf: (key: string) => number) {
    const registers = [this.registry];
    const labelNames: Labels[] = ['service', 'revision', 'group', 'replica'];
    this.requests = new Counter({ name: 'troupe_gateway_requests_total', help: 'Requests answered, by status code', labelNames: [...labelNames, 'code'], registers });
    this.errors = new Counter({ name: 'troupe_gateway_errors_total', help: 'Requests that failed or were refused, by reason', labelNames: [...labelNames, 'reason'], registers });
    this.latency = new Histogram({ name: 'troupe_gateway_request_duration_seconds', help: 'From the request received to the response ended', labelNames, buckets: LATENCY_BUCKETS, registers });
    this.firstByte = new Histogram({ name: 'troupe_gateway_response_headers_seconds', help: "From the request received to the replica's response headers", labelNames, buckets: LATENCY_BUCKETS, registers });
    this.probeFailures = new Counter({ name: 'troupe_gateway_probe_failures_total', help: 'Probes after READY that failed: an error, a timeout or an answer other than 2xx', labelNames, registers });
    this.probesFailing = new Gauge({ name: 'troupe_gateway_replicas_probes_failing', help: 'Ready replicas given no new request because a probe after READY fails', labelNames: ['service', 'revision', 'group'], registers });
    const replicas = this.replicas;
    this.inflight = new Gauge({
      name: 'troupe_gateway_inflight_requests',
      help: 'Requests in flight to each replica',
      labelNames,
      registers,
      collect() {
        for (const m of replicas.values()) if (m.labels.replica !== '') this.set(m.labels, inflightOf(m.key));
      },
    });
  }

  /** The metrics of one replica (`group` and `replica` empty: a service's refusals), made once per label set. */
  of(key: string, service: string, revision: number, group: string, replica: string): ReplicaMetrics {
    let m = this.replicas.get(key);
    if (!m) {
      m = new ReplicaMetrics(this, key, { service, revision: String(revision), group, replica });
      this.replicas.set(key, m);
    }
    return m;
  }
}
