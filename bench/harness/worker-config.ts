import { z } from 'zod';

/** How bench/harness/worker-main.ts is configured (JSON in TROUPE_BENCH_WORKER). */
export const WorkerConfigSchema = z.object({
  address: z.string(),
  task_queue: z.string(),
  bundle_path: z.string(),
  backend: z.discriminatedUnion('kind', [
    z.object({ kind: z.literal('simulated'), job_duration_ms: z.number().int().nonnegative() }),
    z.object({ kind: z.literal('shared-simulated'), dir: z.string(), job_duration_ms: z.number().int().nonnegative() }),
    /** The real local fleet (bench/scale-real.ts), registered as `local`. */
    z.object({
      kind: z.literal('local'),
      state_dir: z.string(),
      network: z.enum(['netns', 'loopback']),
      subnet: z.string().optional(),
      /** GPUs per instance (the PD sample's workers ask for one). */
      gpus: z.number().int().nonnegative().optional(),
      release_grace_s: z.number().nonnegative().optional(),
    }),
  ]),
  /** The worker's activity slots; the SDK's default (100) when absent. */
  max_concurrent_activities: z.number().int().positive().optional(),
  /** The gateways the worker pushes services' tables to (as `troupe worker --gateway` with its admin token). */
  gateways: z.array(z.object({ url: z.string(), token: z.string() })).optional(),
  /** HOST:PORT: serve the worker's metrics there, the SDK's exporter on, as `troupe worker --metrics` does. */
  metrics: z.string().optional(),
});
export type WorkerConfig = z.infer<typeof WorkerConfigSchema>;
