import { z } from 'zod';
import { ResourcesSchema } from '../config/resources-schema';
import { SshTargetSchema } from '../backends/ssh/target';
import { HostFactsSchema } from '../backends/ssh/detect';

/**
 * A fleet as FleetWorkflow holds it: hosts over SSH, what each has, and which run/job holds it.
 * The updates and the query are in src/contract/fleet-messages.ts, which imports only these types:
 * a workflow's modules are evaluated again for every new workflow of a worker, and zod's are the
 * largest. FleetWorkflow loads this module when it starts.
 */

export const FleetHostSpecSchema = z.object({
  target: SshTargetSchema,
  /** `internal_ip` from the config: the address peers use. */
  internal_ip: z.string().nullable(),
  /** `network` (CIDR) from the config: the internal address is the host's address in it. */
  network: z.string().nullable(),
});
export type FleetHostSpec = z.infer<typeof FleetHostSpecSchema>;

export const FleetSpecSchema = z.object({
  name: z.string(),
  placement: z.enum(['any', 'cluster']),
  hosts: z.array(FleetHostSpecSchema).min(1),
});
export type FleetSpec = z.infer<typeof FleetSpecSchema>;

export const HolderSchema = z.object({
  run_id: z.string(),
  /** The run's workflow id (the workers' reaper frees hosts of runs closed without teardown); absent in holds from before it was kept. */
  run_workflow_id: z.string().optional(),
  run_name: z.string(),
  submission: z.number().int(),
  job_num: z.number().int(),
  job_name: z.string(),
  /** The job's attempt (absent: 0, its first machine); a replacement holds a host of its own. */
  attempt: z.number().int().nonnegative().optional(),
});
export type Holder = z.infer<typeof HolderSchema>;

export const HostKeySourceSchema = z.enum(['known_hosts', 'fingerprint', 'pinned']);
export type HostKeySource = z.infer<typeof HostKeySourceSchema>;

export const HostKeySchema = z.object({
  fingerprint: z.string(),
  /** How it was verified: a known_hosts entry, a fingerprint in the config, or pinned at first contact. */
  source: HostKeySourceSchema,
  /** Key type, `ssh-ed25519`…: which of the host's key files to compare the fingerprint with. */
  algorithm: z.string().nullable().default(null),
  /** When it was first verified (pinned keys: the moment of first contact). */
  since: z.string().nullable().default(null),
});
export type HostKey = z.infer<typeof HostKeySchema>;

export const FleetHostStateSchema = z.object({
  index: z.number().int(),
  spec: FleetHostSpecSchema,
  /** `probing`: never answered yet; `ready`: usable; `unreachable`: see `reason` (re-apply the fleet to probe again). */
  status: z.enum(['probing', 'ready', 'unreachable']),
  reason: z.string().nullable(),
  facts: HostFactsSchema.nullable(),
  internal_ip: z.string().nullable(),
  host_key: HostKeySchema.nullable(),
  /** The key of the host's proxy_jump host, verified the same way (null without a jump host). */
  jump_host_key: HostKeySchema.nullable().default(null),
  holder: HolderSchema.nullable(),
  probed_at: z.string().nullable(),
});
export type FleetHostState = z.infer<typeof FleetHostStateSchema>;

export const FleetStateSchema = z.object({
  name: z.string(),
  placement: z.enum(['any', 'cluster']),
  hosts: z.array(FleetHostStateSchema),
  /** `run_id/submission` already released: a late allocation for them is refused. Bounded. */
  closed_submissions: z.array(z.string()),
  deleted: z.boolean(),
});
export type FleetState = z.infer<typeof FleetStateSchema>;

export const AllocateRequestSchema = z.object({
  run_id: z.string(),
  run_workflow_id: z.string().optional(),
  run_name: z.string(),
  submission: z.number().int(),
  group_name: z.string(),
  resources: ResourcesSchema,
  jobs: z.array(z.object({ job_num: z.number().int(), job_name: z.string(), attempt: z.number().int().nonnegative().optional() })).min(1),
});
export type AllocateRequest = z.infer<typeof AllocateRequestSchema>;

/** A host as a job of a run holds it: what the backend needs to reach it with its verified key. */
export interface HeldHost {
  /** The run that holds it (its name, for messages and the job's ref). */
  run_name: string;
  job_num: number;
  job_name: string;
  /** The job's attempt; absent for attempt 0. */
  attempt?: number;
  host_index: number;
  /** The target with the key(s) verified at probe time as its only accepted fingerprints. */
  target: FleetHostSpec['target'];
  internal_ip: string;
  gpus: number;
  /** The SSH user's home on the host (the default job base directory is under it). */
  home: string;
}
