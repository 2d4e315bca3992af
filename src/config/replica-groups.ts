import { z } from 'zod';
import { MAX_TOTAL_NODES } from '../plan/input-size';
import { closedObject } from './closed-object';
import { parseDuration } from './duration';
import { MAX_COUNT, parseRange } from './range';
import { imageSchema } from './references';
import { ResourcesInputSchema } from './resources';
import { parsed, ScalarError, scalar, textListSchema, toInt, toNumber } from './scalars';
import { groupExtensionShape, groupNameSchema } from './task-schema';
import { describeValue } from './yaml-source';

/**
 * A service's replicas and replica groups in dstack's format (checked against dstack 0.22.5):
 * `replicas: N | MIN..MAX` with `scaling`, and the entries of `groups:`. Rules across a group's
 * fields and across groups are in service-schema.ts.
 */

/** Replicas at start (`min`) and at most (`max`); equal for a fixed count. */
export interface ReplicaCount {
  min: number;
  max: number;
}

/** dstack's replica range: `2`, `0..4`, `..4` (from 0), `{min, max}`; the maximum is required. */
export function parseReplicas(value: unknown): ReplicaCount {
  const range = parseRange(value, toInt, 'a whole number', MAX_COUNT, '');
  if (range.max === null) throw new ScalarError('the maximum number of replicas is required: write N or MIN..MAX, e.g. 1..4');
  if (range.max > MAX_TOTAL_NODES) throw new ScalarError(`${range.max} replicas: a service has at most ${MAX_TOTAL_NODES} replicas`);
  return { min: range.min ?? 0, max: range.max };
}

/** dstack's allowed `scaling.window` values, in seconds. */
export const SCALING_WINDOWS_S = [30, 60, 300] as const;

function nonNegativeDuration(value: unknown): number {
  const seconds = parseDuration(value);
  // dstack takes a negative delay; it can only mean "none", so Troupe asks for 0 instead.
  if (seconds < 0) throw new ScalarError(`a delay cannot be negative, got ${describeValue(value)}: write 0 for none`);
  return seconds;
}

function scalingWindow(value: unknown): number {
  const seconds = parseDuration(value);
  if (!(SCALING_WINDOWS_S as readonly number[]).includes(seconds)) {
    throw new ScalarError(`the window must be one of ${SCALING_WINDOWS_S.map((s) => `${s}s`).join(', ')}, got ${describeValue(value)}`);
  }
  return seconds;
}

export { ScalingMetricSchema } from '../plan/plan-schema';
import { ScalingMetricSchema } from '../plan/plan-schema';

/** A Prometheus metric name (the exposition format's rule). */
const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

function metricName(value: unknown): string {
  if (typeof value !== 'string' || !METRIC_NAME.test(value)) throw new ScalarError(`expected a Prometheus metric name such as vllm:num_requests_running, got ${describeValue(value)}`);
  return value;
}


function metricsPath(value: unknown): string {
  if (typeof value !== 'string' || !value.startsWith('/') || /[\s\x00-\x1f\x7f]/.test(value)) throw new ScalarError(`expected a path starting with /, such as /metrics, got ${describeValue(value)}`);
  return value;
}

/**
 * Troupe's extension: where a group behind the router reads its OWN traffic — each replica's
 * Prometheus endpoint (`http://ADDRESS:port/path`), a counter of the requests it answered (for
 * `metric: rps`) or a gauge of those it is serving now (for `metric: concurrency`), each summed over
 * the metric's series.
 */
export const ReplicaMetricsInputSchema = closedObject(
  {
    port: scalar('a port number 1..65535', (v) => {
      const n = toInt(v);
      return n !== undefined && n >= 1 && n <= 65535 ? n : undefined;
    }),
    path: parsed(metricsPath).optional(),
    requests: parsed(metricName).optional(),
    inflight: parsed(metricName).optional(),
  },
  { what: '`replica_metrics`' },
);
export type ReplicaMetricsInput = z.output<typeof ReplicaMetricsInputSchema>;

/** Troupe's `scaling.hold`: how long the gateways hold a request while a group scaled to zero wakes (1 s..15 m: a replica has 15 minutes to get READY). */
export const MAX_HOLD_S = 900;

function holdDuration(value: unknown): number {
  const seconds = parseDuration(value);
  if (seconds < 1 || seconds > MAX_HOLD_S) throw new ScalarError(`a hold is 1s to 15m (a replica has 15 minutes to get READY), got ${describeValue(value)}`);
  return seconds;
}

export const ScalingInputSchema = closedObject(
  {
    metric: scalar('rps (requests per second per replica) or concurrency (requests in flight per replica)', (v) => ScalingMetricSchema.safeParse(v).data),
    /** Per replica: requests per second (`rps`), or requests in flight (`concurrency`). */
    target: scalar('a number > 0 (requests per second, or in flight, per replica)', (v) => {
      const n = toNumber(v);
      return n !== undefined && n > 0 ? n : undefined;
    }),
    window: parsed(scalingWindow).nullish(),
    scale_up_delay: parsed(nonNegativeDuration).optional(),
    scale_down_delay: parsed(nonNegativeDuration).optional(),
    replica_metrics: ReplicaMetricsInputSchema.nullish(),
    /** Troupe's extension, for a group that scales from zero (`replicas: 0..N`). */
    hold: parsed(holdDuration).optional(),
  },
  { what: '`scaling`' },
);
export type ScalingInput = z.output<typeof ScalingInputSchema>;

/** dstack's router types; `sglang` is the name `smg` had before dstack 0.22.4. */
export const RouterTypeSchema = z.enum(['smg', 'dynamo']);
export type RouterType = z.infer<typeof RouterTypeSchema>;

function parseRouterType(value: unknown): RouterType {
  if (value === 'sglang') return 'smg';
  const parsedType = RouterTypeSchema.safeParse(value);
  if (!parsedType.success) throw new ScalarError(`expected smg or dynamo, got ${describeValue(value)}`);
  return parsedType.data;
}

/** `router: {}` is an smg router, dstack's default. */
export const RouterInputSchema = closedObject({ type: parsed(parseRouterType).nullish() }, { what: '`router`' });

const UNSUPPORTED_GROUP_FIELDS: Readonly<Record<string, string | true>> = {
  spot_policy: true,
  reservation: true,
  python: 'set `image`',
  nvcc: true,
  docker: true,
  privileged: true,
};

/** One entry of a service's `groups:` (with Troupe's group extensions: `depends_on`, `ready`…). */
export const ReplicaGroupInputSchema = closedObject(
  {
    name: groupNameSchema.nullish(),
    replicas: parsed(parseReplicas).optional(),
    /** dstack's older name for `replicas`, ignored when `replicas` is given. */
    count: parsed(parseReplicas).optional(),
    scaling: ScalingInputSchema.nullish(),
    resources: ResourcesInputSchema.optional(),
    commands: textListSchema.optional(),
    image: imageSchema.nullish(),
    router: RouterInputSchema.nullish(),
    ...groupExtensionShape,
  },
  { what: 'a replica group', unsupported: UNSUPPORTED_GROUP_FIELDS },
);
export type ReplicaGroupInput = z.output<typeof ReplicaGroupInputSchema>;
