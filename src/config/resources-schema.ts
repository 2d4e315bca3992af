import { z } from 'zod';

/** A closed or open interval; `null` means unbounded (or unset) on that side. Sizes are in GB. */
export const RangeSchema = z.object({ min: z.number().nullable(), max: z.number().nullable() });
export type Range = z.infer<typeof RangeSchema>;

export const GpuVendorSchema = z.enum(['nvidia', 'amd', 'google', 'intel', 'tenstorrent']);
export type GpuVendor = z.infer<typeof GpuVendorSchema>;

export const CpuArchSchema = z.enum(['x86', 'arm']);

/** Resources of one node after dstack's defaults are applied (what a backend must satisfy). */
export const ResourcesSchema = z.object({
  cpu: z.object({ arch: CpuArchSchema.nullable(), count: RangeSchema }),
  memory: RangeSchema,
  shm_size: z.number().nullable(),
  disk: RangeSchema.nullable(),
  gpu: z.object({
    vendor: GpuVendorSchema.nullable(),
    name: z.array(z.string()).nullable(),
    count: RangeSchema,
    memory: RangeSchema.nullable(),
    total_memory: RangeSchema.nullable(),
    compute_capability: z.string().nullable(),
  }),
});
export type Resources = z.infer<typeof ResourcesSchema>;
