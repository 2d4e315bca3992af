import { z } from 'zod';
import { FiguresPartSchema } from './figures';
import { ServiceTableSchema } from './routing-table';

/**
 * What a clustered gateway's primary (admin API, tables, state file) and its data-plane workers say to
 * each other over the cluster's IPC channel. Each side parses what it receives: one schema per direction.
 */

const Id = z.int().min(0);

export const ToWorkerSchema = z.discriminatedUnion('type', [
  /** Every table the primary holds: a new worker's start, before it listens. */
  z.strictObject({ type: z.literal('tables'), id: Id, tables: z.array(ServiceTableSchema) }),
  z.strictObject({ type: z.literal('put'), id: Id, table: ServiceTableSchema }),
  z.strictObject({ type: z.literal('delete'), id: Id, run: z.string() }),
  z.strictObject({ type: z.literal('inflight'), id: Id, run: z.string() }),
  /** The worker's metrics registry as prom-client's JSON, for the primary to add up. */
  z.strictObject({ type: z.literal('metrics'), id: Id }),
  /** The worker's figures of a service over the last `windowS` s, for the primary to add up. */
  z.strictObject({ type: z.literal('figures'), id: Id, run: z.string(), windowS: z.int().min(1) }),
  z.strictObject({ type: z.literal('rate'), id: Id, allowed: z.boolean(), retryAfterSeconds: z.number() }),
  /** The primary probes after READY, once for every worker: the URLs of the service's replicas its probes now take out. */
  z.strictObject({ type: z.literal('probes'), run: z.string(), failing: z.array(z.string()) }),
  z.strictObject({ type: z.literal('close'), graceMs: z.int().min(0) }),
]);
export type ToWorker = z.infer<typeof ToWorkerSchema>;

const InflightRowSchema = z.strictObject({
  revision: z.int(),
  group: z.string(),
  url: z.string(),
  state: z.enum(['ready', 'draining', 'removed']),
  inflight: z.int().min(0),
});

export const ToPrimarySchema = z.discriminatedUnion('type', [
  /** Loaded and listening for messages: send it the tables. */
  z.strictObject({ type: z.literal('started') }),
  /** Listening, with the tables of its `tables` message in place. */
  z.strictObject({ type: z.literal('listening'), url: z.string() }),
  /** A `tables`, `put` or `delete` applied: the worker serves it from now on. */
  z.strictObject({ type: z.literal('ack'), id: Id }),
  z.strictObject({ type: z.literal('inflight'), id: Id, rows: z.array(InflightRowSchema) }),
  z.strictObject({ type: z.literal('metrics'), id: Id, metrics: z.array(z.unknown()) }),
  z.strictObject({ type: z.literal('figures'), id: Id, part: FiguresPartSchema }),
  /** A request under a rate limit: the buckets are the primary's, so the limit holds across workers. */
  z.strictObject({ type: z.literal('rate'), id: Id, run: z.string(), path: z.string(), key: z.string() }),
]);
export type ToPrimary = z.infer<typeof ToPrimarySchema>;

/** What a worker is started with (env `TROUPE_GATEWAY_WORKER`, JSON). */
export const WorkerConfigSchema = z.strictObject({
  host: z.string(),
  port: z.int().min(0).max(65535),
  domain: z.string().optional(),
  connectTimeoutMs: z.int().min(1),
  /** File paths only (replica-tunnels.ts): each worker opens its own connections to the jump hosts. */
  tunnels: z.strictObject({ identityFile: z.string().optional(), knownHostsFile: z.string().optional() }).optional(),
});
export type WorkerConfig = z.infer<typeof WorkerConfigSchema>;
export const WORKER_CONFIG_ENV = 'TROUPE_GATEWAY_WORKER';
