import { defineQuery, defineUpdate } from '@temporalio/workflow';
import { z } from 'zod';
import { ResourcesSchema } from '../src/config/resources-schema';
import { SshTargetSchema } from '../src/backends/ssh/target';
import { HostFactsSchema } from '../src/backends/ssh/detect';

/** A fleet as FleetWorkflow holds it: hosts over SSH, what each has, and which run/job holds it. */

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
  run_name: z.string(),
  submission: z.number().int(),
  job_num: z.number().int(),
  job_name: z.string(),
});
export type Holder = z.infer<typeof HolderSchema>;

export const HostKeySchema = z.object({
  fingerprint: z.string(),
  /** How it was verified: a known_hosts entry, a fingerprint in the config, or pinned at first contact. */
  source: z.enum(['known_hosts', 'fingerprint', 'pinned']),
});

export const FleetHostStateSchema = z.object({
  index: z.number().int(),
  spec: FleetHostSpecSchema,
  status: z.enum(['probing', 'ready', 'unreachable']),
  reason: z.string().nullable(),
  facts: HostFactsSchema.nullable(),
  internal_ip: z.string().nullable(),
  host_key: HostKeySchema.nullable(),
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

export interface FleetInput {
  spec: FleetSpec;
  /** Carried over by continue-as-new. */
  state?: FleetState;
}

export const AllocateRequestSchema = z.object({
  run_id: z.string(),
  run_name: z.string(),
  submission: z.number().int(),
  group_name: z.string(),
  resources: ResourcesSchema,
  jobs: z.array(z.object({ job_num: z.number().int(), job_name: z.string() })).min(1),
});
export type AllocateRequest = z.infer<typeof AllocateRequestSchema>;

export interface AllocatedHost {
  job_num: number;
  host_index: number;
  target: FleetHostSpec['target'];
  internal_ip: string;
  gpus: number;
}

export const applyFleetUpdate = defineUpdate<FleetState, [FleetSpec]>('applyFleet');
export const allocateHostsUpdate = defineUpdate<AllocatedHost[], [AllocateRequest]>('allocateHosts');
export const releaseHostsUpdate = defineUpdate<number, [{ run_id: string; submission: number }]>('releaseHosts');
export const deleteFleetUpdate = defineUpdate<void, [{ force: boolean }]>('deleteFleet');
export const fleetStateQuery = defineQuery<FleetState>('fleetState');
