import type { z } from 'zod';
import { closedObject } from './closed-object';
import { gpuVendorsOfName, parseGpuVendor } from './gpu-vendors';
import { bounded, MAX_SIZE_GB, parseCountRange, parseMemoryRange, SIZE_LIMIT_UNIT } from './range';
import type { CpuArchSchema, GpuVendor, Range, Resources } from './resources-schema';
import { parsed, parseMemory, ScalarError, toInt, toText, within } from './scalars';
import { describeValue } from './yaml-source';

/**
 * `resources:` in dstack's syntax, with dstack's defaults (checked against dstack 0.21.2):
 * cpu `2..`, memory `8GB..`, disk `100GB..`, no GPU requirement (`0..`) unless `gpu:` is written,
 * and then at least one GPU (`1..`) unless a count is given. Sizes are in GB.
 */

type CpuArch = z.infer<typeof CpuArchSchema>;
type Gpu = Resources['gpu'];

const DEFAULT_CPU_COUNT: Range = { min: 2, max: null };
const DEFAULT_MEMORY: Range = { min: 8, max: null };
const DEFAULT_DISK: Range = { min: 100, max: null };
/** `gpu:` written at all means "some GPU": at least one unless a count is given. */
const DEFAULT_GPU_COUNT: Range = { min: 1, max: null };

/** No `gpu:` (or `gpu: null`): any number of GPUs, none required. */
function noGpuRequirement(): Gpu {
  return { vendor: null, name: null, count: { min: 0, max: null }, memory: null, total_memory: null, compute_capability: null };
}

export function defaultResources(): Resources {
  return {
    cpu: { arch: null, count: { ...DEFAULT_CPU_COUNT } },
    memory: { ...DEFAULT_MEMORY },
    shm_size: null,
    disk: { ...DEFAULT_DISK },
    gpu: noGpuRequirement(),
  };
}

function isMapping(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value) && !(value instanceof Date);
}

function refuseUnknownKeys(value: Record<string, unknown>, allowed: readonly string[], what: string): void {
  const extra = Object.keys(value).find((k) => !allowed.includes(k));
  if (extra !== undefined) {
    throw new ScalarError(`unknown field \`${extra}\` in ${what}: expected ${allowed.map((k) => `\`${k}\``).join(', ')}`, [extra], 'key');
  }
}

function parseArch(value: unknown): CpuArch | null {
  if (value === null || value === undefined) return null;
  const text = typeof value === 'string' ? value.toLowerCase() : undefined;
  if (text === 'x86' || text === 'arm') return text;
  throw new ScalarError(`unknown CPU architecture ${describeValue(value)}: use x86 or arm`);
}

/** `cpu: 4`, `2..8`, `arm`, `arm:8`, `{arch, count}` or (older form) `{min, max}`. */
export function parseCpu(value: unknown): Resources['cpu'] {
  const text = typeof value === 'number' && Number.isSafeInteger(value) ? String(value) : value;
  if (typeof text === 'string') {
    const spec: { arch?: CpuArch; count?: Range } = {};
    for (const token of text.replaceAll(' ', '').split(':')) {
      if (token === '') throw new ScalarError(`"${text}" has an empty part: write e.g. 8, 2..8, arm or arm:8`);
      if (token.includes('..') || /^\d+$/.test(token)) {
        if (spec.count) throw new ScalarError(`"${text}" gives the CPU count twice`);
        spec.count = parseCountRange(token);
      } else {
        const arch = token.toLowerCase();
        if (arch !== 'x86' && arch !== 'arm') {
          throw new ScalarError(`"${text}": "${token}" is not a CPU architecture (x86 or arm) nor a count`);
        }
        if (spec.arch) throw new ScalarError(`"${text}" gives the CPU architecture twice`);
        spec.arch = arch;
      }
    }
    return { arch: spec.arch ?? null, count: spec.count ?? { ...DEFAULT_CPU_COUNT } };
  }
  if (isMapping(value)) {
    const keys = Object.keys(value);
    if (keys.length > 0 && keys.every((k) => k === 'min' || k === 'max')) {
      return { arch: null, count: parseCountRange(value) };
    }
    refuseUnknownKeys(value, ['arch', 'count'], '`cpu`');
    return {
      arch: within('arch', () => parseArch(value.arch)),
      count: value.count === undefined ? { ...DEFAULT_CPU_COUNT } : within('count', () => parseCountRange(value.count)),
    };
  }
  throw new ScalarError(`expected a CPU count, a range or arch:count (e.g. 4, 2..8, arm:8), got ${describeValue(value)}`);
}

function parseGpuNames(value: unknown): string[] {
  const list = Array.isArray(value) ? value : [value];
  return list.map((item) => {
    const name = toText(item);
    if (name === undefined || name === '') throw new ScalarError(`expected GPU names (e.g. H100 or [H100, A100]), got ${describeValue(value)}`);
    // `tpu-v3-8` is the old spelling of `v3-8`.
    return name.startsWith('tpu-') ? name.slice(4) : name;
  });
}

function parseComputeCapability(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  let parts: unknown[] | undefined;
  // A YAML `8.0` reaches us as the number 8.
  if (typeof value === 'number') parts = Number.isInteger(value) ? [value, 0] : String(value).split('.');
  else if (typeof value === 'string') parts = value.trim().split('.');
  else if (Array.isArray(value)) parts = value;
  const ints = parts?.map((p) => toInt(p));
  if (!ints || ints.length !== 2 || ints.some((n) => n === undefined)) {
    throw new ScalarError(`expected a compute capability such as 8.0, got ${describeValue(value)}`);
  }
  return `${ints[0]}.${ints[1]}`;
}

/**
 * `gpu: L40S`, `H100,A100:80GB:2`, `nvidia:2`, `24GB..:1..4`, `v5litepod-8`, `0`, or a mapping
 * with vendor/name/count/memory/total_memory/compute_capability. In the `:` form a vendor word is
 * the vendor, a token starting with a letter is the name list, one with a unit the memory, and
 * the rest the count.
 */
export function parseGpu(value: unknown): Gpu {
  const gpu: Gpu = { ...noGpuRequirement(), count: { ...DEFAULT_GPU_COUNT } };
  const text = typeof value === 'number' && Number.isSafeInteger(value) ? String(value) : value;
  if (typeof text === 'string') {
    const seen = new Set<string>();
    const once = (part: string, token: string): void => {
      if (seen.has(part)) throw new ScalarError(`"${text}" gives the GPU ${part} twice ("${token}")`);
      seen.add(part);
    };
    for (const token of text.replaceAll(' ', '').split(':')) {
      if (token === '') throw new ScalarError(`"${text}" has an empty part: write e.g. A100:2, H100,A100:80GB or 24GB..:1..4`);
      const vendor = parseGpuVendor(token);
      if (vendor) {
        once('vendor', token);
        gpu.vendor = vendor;
      } else if (/^\p{L}/u.test(token)) {
        once('name', token);
        const names = token.split(',');
        if (names.some((n) => n === '')) throw new ScalarError(`"${text}" has an empty GPU name`);
        gpu.name = parseGpuNames(names);
      } else if (/\p{L}/u.test(token)) {
        once('memory', token);
        gpu.memory = parseMemoryRange(token);
      } else {
        once('count', token);
        gpu.count = parseCountRange(token);
      }
    }
    return gpu;
  }
  if (isMapping(value)) {
    refuseUnknownKeys(value, ['vendor', 'name', 'count', 'memory', 'total_memory', 'compute_capability'], '`gpu`');
    const given = (key: string): unknown => (value[key] === null ? undefined : value[key]);
    const vendor = given('vendor');
    if (vendor !== undefined) {
      gpu.vendor = within('vendor', () => {
        const parsedVendor = typeof vendor === 'string' ? parseGpuVendor(vendor) : undefined;
        if (!parsedVendor) {
          throw new ScalarError(`unknown GPU vendor ${JSON.stringify(vendor)}: use nvidia, amd, google (tpu), intel or tenstorrent`);
        }
        return parsedVendor;
      });
    }
    const name = given('name');
    if (name !== undefined) gpu.name = within('name', () => parseGpuNames(name));
    // `count: null` is refused, as dstack does: the count is not optional once `gpu` is a mapping.
    if (value.count !== undefined) gpu.count = within('count', () => parseCountRange(value.count));
    const memory = given('memory');
    if (memory !== undefined) gpu.memory = within('memory', () => parseMemoryRange(memory));
    const totalMemory = given('total_memory');
    if (totalMemory !== undefined) gpu.total_memory = within('total_memory', () => parseMemoryRange(totalMemory));
    gpu.compute_capability = within('compute_capability', () => parseComputeCapability(value.compute_capability));
    return gpu;
  }
  throw new ScalarError(`expected a GPU spec such as L40S, A100:2, nvidia:24GB..:1..4 or 0, got ${describeValue(value)}`);
}

/** `disk: 100GB..` or `disk: {size: 100GB..}`; `null` means no disk requirement. */
export function parseDisk(value: unknown): Range | null {
  if (value === null) return null;
  if (isMapping(value)) {
    refuseUnknownKeys(value, ['size'], '`disk`');
    if (value.size === undefined) throw new ScalarError('`disk` needs `size`, e.g. disk: {size: 100GB..}');
    return within('size', () => parseMemoryRange(value.size));
  }
  return parseMemoryRange(value);
}

function parseShmSize(value: unknown): number | null {
  if (value === null) return null;
  const size = parseMemory(value);
  if (size === undefined) throw new ScalarError(`expected a size such as 8GB, got ${describeValue(value)}`);
  return bounded(value, size, MAX_SIZE_GB, SIZE_LIMIT_UNIT);
}

/**
 * The `resources:` mapping. Each field is its own schema so that a refusal points at the field;
 * absent fields take dstack's defaults.
 */
export const ResourcesInputSchema = closedObject(
  {
    cpu: parsed(parseCpu).optional(),
    memory: parsed(parseMemoryRange).optional(),
    shm_size: parsed(parseShmSize).optional(),
    gpu: parsed((v) => (v === null ? noGpuRequirement() : parseGpu(v))).optional(),
    disk: parsed(parseDisk).optional(),
  },
  { what: '`resources`' },
).transform((input): Resources => {
    const out = defaultResources();
    if (input.cpu) out.cpu = input.cpu;
    if (input.memory) out.memory = input.memory;
    if (input.shm_size !== undefined) out.shm_size = input.shm_size;
    if (input.gpu) out.gpu = input.gpu;
    if (input.disk !== undefined) out.disk = input.disk;
    return out;
  });

/**
 * The defaults dstack's server adds to a node's resources (checked against dstack 0.21.2):
 *
 * - GPU vendor: a vendor already given stays; no GPU wanted (`count` max 0) leaves it unset;
 *   without names, the default image (no `image:`) means NVIDIA; with names, the one vendor they
 *   all belong to (unset when they disagree or one is unknown).
 * - CPU architecture: with no `image:` the default image is x86-only, so `x86`; with an image
 *   dstack asks its registry, which Troupe does not, so it stays unset (any) as for a multi-arch
 *   image.
 */
export function withServerDefaults(resources: Resources, image: string | null): Resources {
  const cpu = resources.cpu.arch === null && image === null ? { ...resources.cpu, arch: 'x86' as const } : resources.cpu;
  return { ...resources, cpu, gpu: { ...resources.gpu, vendor: inferGpuVendor(resources.gpu, image) } };
}

function inferGpuVendor(gpu: Gpu, image: string | null): GpuVendor | null {
  if (gpu.vendor !== null || gpu.count.max === 0) return gpu.vendor;
  if (!gpu.name || gpu.name.length === 0) return image === null ? 'nvidia' : null;
  const vendors = new Set<GpuVendor | null>();
  for (const name of gpu.name) {
    const found = gpuVendorsOfName(name);
    if (found.length === 0) vendors.add(null);
    for (const v of found) vendors.add(v);
  }
  return vendors.size === 1 ? ([...vendors][0] ?? null) : null;
}

/**
 * The vendors of the requested accelerators that the default image cannot run (AMD, Intel,
 * Tenstorrent): they need an `image:`. NVIDIA and Google TPU work without one.
 */
export function vendorsNeedingImage(resources: Resources, image: string | null): GpuVendor[] {
  const gpu = resources.gpu;
  if (image !== null || gpu.count.max === 0) return [];
  const vendors = new Set<GpuVendor>();
  if (gpu.vendor !== null) vendors.add(gpu.vendor);
  else for (const name of gpu.name ?? []) for (const v of gpuVendorsOfName(name)) vendors.add(v);
  vendors.delete('nvidia');
  vendors.delete('google');
  return [...vendors].sort();
}
