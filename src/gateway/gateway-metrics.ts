import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** From a cached answer on the same host to a long LLM completion. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

type Labels = 'service' | 'revision' | 'group' | 'replica';

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

  constructor() {
    const registers = [this.registry];
    const labelNames: Labels[] = ['service', 'revision', 'group', 'replica'];
    this.requests = new Counter({ name: 'troupe_gateway_requests_total', help: 'Requests answered, by status code', labelNames: [...labelNames, 'code'], registers });
    this.errors = new Counter({ name: 'troupe_gateway_errors_total', help: 'Requests that failed or were refused, by reason', labelNames: [...labelNames, 'reason'], registers });
    this.latency = new Histogram({ name: 'troupe_gateway_request_duration_seconds', help: 'From the request received to the response ended', labelNames, buckets: LATENCY_BUCKETS, registers });
    this.firstByte = new Histogram({ name: 'troupe_gateway_response_headers_seconds', help: "From the request received to the replica's response headers", labelNames, buckets: LATENCY_BUCKETS, registers });
    this.inflight = new Gauge({ name: 'troupe_gateway_inflight_requests', help: 'Requests in flight to each replica', labelNames, registers });
  }
}
