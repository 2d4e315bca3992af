import { createHash } from 'node:crypto';
import type { ServicePlan } from './service-plan-schema';

/**
 * A service's revision (issue 28): the hash of what defines its replicas' behaviour, so that two
 * applies of the same service give the same revision and a change that needs new replicas gives a
 * new one. Per group: its name, commands, image, router, resources, probes and `ready` probe; for the
 * run: the port, working_dir and env. Secrets count by NAME only: their values are sealed anew on
 * each apply, and sealing again must not roll the service. Replica counts, their ranges and
 * `scaling` are not part of it: scaling a service keeps its revision.
 *
 * Changing what is hashed here changes the revision of every service, so that its next apply rolls.
 */

/** What the revision is computed from: a service plan, with or without its revision. */
export type RevisionInput = Pick<ServicePlan, 'port' | 'working_dir' | 'env' | 'secret_env' | 'groups'>;

export const REVISION_LENGTH = 12;

/** 12 lowercase hex characters: sha256 over the rolling fields as canonical (key-sorted) JSON. */
export function serviceRevision(service: RevisionInput): string {
  const secret = new Set(service.secret_env);
  const rolling = {
    port: service.port,
    working_dir: service.working_dir,
    env: Object.fromEntries(Object.entries(service.env).filter(([name]) => !secret.has(name))),
    secret_env: [...secret].sort(),
    groups: service.groups.map((g) => ({
      name: g.name,
      commands: g.commands,
      image: g.image,
      router: g.router,
      resources: g.resources,
      probes: g.probes,
      ready: g.ready ?? null,
    })),
  };
  return createHash('sha256').update(canonicalJson(rolling)).digest('hex').slice(0, REVISION_LENGTH);
}

/**
 * JSON with every object's keys sorted, so equal values give equal text whatever order their keys
 * were built in. Written here rather than taken from a package: a plan is plain JSON (no dates,
 * no bigints), which makes this a few lines.
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v)).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  // As JSON.stringify does in an array: undefined (and what JSON cannot hold) is null.
  return JSON.stringify(value) ?? 'null';
}
