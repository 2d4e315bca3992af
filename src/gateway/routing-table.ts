import { z } from 'zod';
import { RUN_NAME } from '../plan/run-name';
import { MAX_PROBE_TIMEOUT_S, MAX_PROBES } from '../config/service-schema';
import { ServiceProbeSchema } from '../plan/service-plan-schema';
import { HOSTNAME, USER_NAME } from '../config/references';

/**
 * The gateway's routing table for one service: the contract a run pushes to every gateway (through the
 * pushServiceTable activity) and the gateway keeps in its state file. The gateway decides nothing about a service
 * beyond it: which replicas exist and are ready is the run's to say.
 */

const SHA256_HEX = /^[0-9a-f]{64}$/;
const HEADER_NAME = /^[a-zA-Z0-9_-]{1,500}$/;

/** An http(s) origin alone: no path, query, fragment or user. */
export function isHttpOrigin(value: string): boolean {
  if (!URL.canParse(value)) return false;
  const url = new URL(value);
  return (url.protocol === 'http:' || url.protocol === 'https:') && (url.pathname === '/' || url.pathname === '') && !url.search && !url.hash && !url.username && !url.password;
}

/**
 * How a gateway reaches a replica it has no route to (a host on a private subnet behind its fleet's
 * `proxy_jump`): through an SSH tunnel over this host. No secret: the table travels through Temporal's
 * history, so the key is the gateway operator's to give (`troupe gateway --ssh-identity FILE`).
 */
export const ReplicaViaSchema = z.strictObject({
  host: z.string().regex(HOSTNAME, { message: 'a host name or address' }),
  port: z.int().min(1).max(65535),
  user: z.string().regex(USER_NAME, { message: 'a user name' }),
  /** The jump host's key as its fleet verified it; a gateway given `--ssh-known-hosts` checks that file instead. */
  host_key_fingerprints: z.array(z.string().regex(/^SHA256:[A-Za-z0-9+/]{43}$/, { message: 'SHA256:<43 base64 characters>' })).max(8).optional(),
  /** `host` is the replica's own host (its private address, no proxy_jump): straight first, through it only where there is no route. */
  direct_first: z.literal(true).optional(),
});

export const ReplicaSchema = z.strictObject({
  /** An origin only (`http://10.0.0.5:8000`): the request's path is the client's. */
  url: z.string().refine(isHttpOrigin, { message: 'expected an http(s) origin such as http://10.0.0.5:8000, with no path, query or user' }),
  /** `draining`: no new request; the ones in flight finish. */
  state: z.enum(['ready', 'draining']),
  /** Absent: the gateway connects to the URL itself. */
  via: ReplicaViaSchema.optional(),
});

export const GroupSchema = z.strictObject({
  name: z.string().min(1).max(100),
  replicas: z.array(ReplicaSchema).max(1000),
});

export const RevisionSchema = z
  .strictObject({
    number: z.int().min(0),
    /** The groups requests enter by: the router group where there is one, else every replica group. */
    entry: z.array(z.string()).min(1),
    groups: z.array(GroupSchema).min(1),
    /**
     * A revision other than the current one: the percent of new requests it gets (a canary); absent is 0.
     * The current revision takes what the others leave, so it has none of its own.
     */
    traffic: z.int().min(0).max(100).optional(),
  })
  .superRefine((revision, ctx) => {
    const names = revision.groups.map((g) => g.name);
    const twice = names.find((name, i) => names.indexOf(name) !== i);
    if (twice !== undefined) ctx.addIssue({ code: 'custom', path: ['groups'], message: `group "${twice}" is named twice` });
    for (const [i, entry] of revision.entry.entries()) {
      if (!names.includes(entry)) ctx.addIssue({ code: 'custom', path: ['entry', i], message: `entry group "${entry}" is not among the groups (${names.join(', ')})` });
    }
  });

export const RateLimitKeySchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('ip_address') }),
  z.strictObject({ type: z.literal('header'), header: z.string().regex(HEADER_NAME) }),
]);

export const RateLimitSchema = z.strictObject({
  prefix: z.string().regex(/^\/[^\s\\{}]*$/, { message: 'a path prefix starts with / and has no spaces, \\, { or }' }).default('/'),
  rps: z.number().min(1 / 60).max(1_000_000),
  /** Requests allowed above the rate in a burst (nginx's and dstack's meaning): the bucket holds burst + 1. */
  burst: z.int().min(0).default(0),
  key: RateLimitKeySchema.default({ type: 'ip_address' }),
});

/**
 * A probe as the service's plan has it (dstack's fields and defaults), bounded as a table from the network
 * must be. The gateway runs those with `until_ready: false` on each ready entry replica for its whole life.
 */
export const TableProbeSchema = z.strictObject({
  ...ServiceProbeSchema.shape,
  /** A path on the replica: the probe never leaves the replica's origin. */
  url: z.string().regex(/^\/[\x20-\x7e\u00a0-\uffff]{0,2047}$/, { message: 'a URL path: starts with /, printable characters, at most 2048' }),
  /** Names as HTTP allows them (RFC 9110 token), as long as the config's. */
  headers: z.array(z.strictObject({ name: z.string().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$/), value: z.string().max(2048) })).max(16),
  body: z.string().max(2048).nullable(),
  timeout_s: z.int().min(1).max(MAX_PROBE_TIMEOUT_S),
  interval_s: z.int().min(1).max(86_400),
  ready_after: z.int().min(1).max(1000),
});

export const ServiceTableSchema = z
  .strictObject({
    run: z.string().regex(RUN_NAME, { message: 'a run name: a lowercase letter, then 1–40 of a-z, 0-9, -' }),
    /** Grows with each table the run pushes: a gateway refuses a lower one, so a late retry never undoes a newer table. */
    generation: z.int().min(0),
    /** null: open to anyone. Tokens are kept as SHA-256 hashes (hex); the gateway never sees them in clear. */
    auth: z.strictObject({ token_sha256: z.array(z.string().regex(SHA256_HEX, { message: 'a SHA-256 hash, 64 lowercase hex digits' })).min(1).max(100) }).nullable(),
    /** dstack's default: the upstream sees `/x` for `/services/<run>/x`. */
    strip_prefix: z.boolean().default(true),
    rate_limits: z.array(RateLimitSchema).max(100).default([]),
    /** The revision new requests go to; older ones stay listed while their replicas drain. */
    current_revision: z.int().min(0),
    revisions: z.array(RevisionSchema).min(1).max(20),
    /**
     * With no ready entry replica in any revision, a request waits up to this long for a table that brings
     * one (a service scaled to zero starting its first replica); 0: a 503 at once.
     */
    hold_s: z.int().min(0).max(900).default(0),
    /**
     * The service's probes. Those with `until_ready: false` go on after READY: a ready entry replica whose
     * probe fails gets no new request until it passes `ready_after` times in a row. Absent or empty: none.
     */
    probes: z.array(TableProbeSchema).max(MAX_PROBES).default([]),
  })
  .superRefine((table, ctx) => {
    const numbers = table.revisions.map((r) => r.number);
    const twice = numbers.find((n, i) => numbers.indexOf(n) !== i);
    if (twice !== undefined) ctx.addIssue({ code: 'custom', path: ['revisions'], message: `revision ${twice} is listed twice` });
    if (!numbers.includes(table.current_revision)) {
      ctx.addIssue({ code: 'custom', path: ['current_revision'], message: `revision ${table.current_revision} is not among the revisions (${numbers.join(', ')})` });
    }
    for (const [i, revision] of table.revisions.entries()) {
      if (revision.number === table.current_revision && revision.traffic !== undefined) {
        ctx.addIssue({ code: 'custom', path: ['revisions', i, 'traffic'], message: `revision ${revision.number} is the current one, which takes the traffic the others leave (100 − theirs): give it no traffic field` });
      }
    }
    const others = table.revisions.filter((r) => r.number !== table.current_revision && (r.traffic ?? 0) > 0);
    const shared = others.reduce((sum, r) => sum + (r.traffic ?? 0), 0);
    if (shared > 100) {
      ctx.addIssue({ code: 'custom', path: ['revisions'], message: `the revisions other than the current one take ${shared}% of the traffic (${others.map((r) => `${r.number}: ${r.traffic ?? 0}`).join(', ')}); together at most 100` });
    }
    const prefixes = table.rate_limits.map((l) => l.prefix);
    const dup = prefixes.find((p, i) => prefixes.indexOf(p) !== i);
    if (dup !== undefined) ctx.addIssue({ code: 'custom', path: ['rate_limits'], message: `two rate limits for prefix "${dup}"` });
  });

export type Replica = z.infer<typeof ReplicaSchema>;
export type ReplicaVia = z.infer<typeof ReplicaViaSchema>;
export type TableProbe = z.infer<typeof TableProbeSchema>;
export type RateLimit = z.infer<typeof RateLimitSchema>;
export type Revision = z.infer<typeof RevisionSchema>;
export type ServiceTable = z.infer<typeof ServiceTableSchema>;
export type ServiceTableInput = z.input<typeof ServiceTableSchema>;

/** What the admin API's `GET /info` answers: where this gateway serves, for a run to tell its user. */
export const GatewayInfoSchema = z.strictObject({
  data_plane_url: z.string().refine(isHttpOrigin, { message: 'expected the data plane as http://HOST:PORT' }),
  domain: z.string().min(1).nullable(),
});
export type GatewayInfo = z.infer<typeof GatewayInfoSchema>;

/** What a gateway keeps across restarts: every service's table. */
export const GatewayStateSchema = z.strictObject({
  version: z.literal(1),
  services: z.array(ServiceTableSchema),
});
export type GatewayState = z.infer<typeof GatewayStateSchema>;

/** A zod failure as one line a caller can act on: `field.path: message; …` (`whole`: what an issue of the whole body is said of). */
export function describeTableIssues(error: z.ZodError, whole = '(table)'): string {
  return error.issues.map((issue) => `${issue.path.length > 0 ? issue.path.join('.') : whole}: ${issue.message}`).join('; ');
}
