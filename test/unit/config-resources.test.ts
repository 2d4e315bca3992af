import { describe, expect, it } from 'vitest';
import { gpuVendorsOfName, parseGpuVendor } from '../../src/config/gpu-vendors';
import { parseCountRange, parseMemoryRange } from '../../src/config/range';
import {
  defaultResources,
  parseCpu,
  parseDisk,
  parseGpu,
  ResourcesInputSchema,
  vendorsNeedingImage,
  withServerDefaults,
} from '../../src/config/resources';
import type { Resources } from '../../src/config/resources-schema';
import { parseMemory, ScalarError } from '../../src/config/scalars';
import { thrownBy } from '../helpers/refusal';

function refusalOf(fn: () => unknown): string {
  return thrownBy(fn, ScalarError).message;
}

describe('ranges', () => {
  it.each([
    [4, { min: 4, max: 4 }],
    ['4', { min: 4, max: 4 }],
    ['2..8', { min: 2, max: 8 }],
    ['2..', { min: 2, max: null }],
    ['..8', { min: null, max: 8 }],
    [' 2 .. 8 ', { min: 2, max: 8 }],
    [{ min: 1 }, { min: 1, max: null }],
    [{ min: 1, max: 3 }, { min: 1, max: 3 }],
  ])('count %j → %j', (input, expected) => {
    expect(parseCountRange(input)).toEqual(expected);
  });

  it.each([
    ['..', 'empty range ".."'],
    ['8..4', 'range 8..4 has its minimum above its maximum'],
    ['1..2..3', 'is not a range'],
    [1.5, 'a whole number'],
    ['two', 'a whole number'],
    [{ min: 1, low: 2 }, 'unknown field `low` in a range'],
    [[1, 2], 'got a list'],
  ])('count %j is refused', (input, message) => {
    expect(refusalOf(() => parseCountRange(input))).toContain(message);
  });

  it.each([
    ['8GB', { min: 8, max: 8 }],
    ['8GB..', { min: 8, max: null }],
    ['16GB..64GB', { min: 16, max: 64 }],
    ['512MB..', { min: 0.5, max: null }],
    ['1TB', { min: 1024, max: 1024 }],
    ['16', { min: 16, max: 16 }],
    [24, { min: 24, max: 24 }],
    ['1.5gb..', { min: 1.5, max: null }],
    ['8GB...16GB', 'minimum above'],
    ['8XB', 'a size such as 8GB'],
  ])('memory %j → %j', (input, expected) => {
    if (typeof expected === 'string') expect(refusalOf(() => parseMemoryRange(input))).toContain(expected);
    else expect(parseMemoryRange(input)).toEqual(expected);
  });

  it('reads sizes as Python float() with units', () => {
    expect(parseMemory('1_000MB')).toBeCloseTo(1000 / 1024);
    expect(parseMemory(' 2 TB ')).toBe(2048);
    expect(parseMemory('inf')).toBeUndefined();
    expect(parseMemory('0x10')).toBeUndefined();
    expect(parseMemory('')).toBeUndefined();
    expect(parseMemory(true)).toBeUndefined();
  });
});

describe('cpu', () => {
  it.each([
    [4, { arch: null, count: { min: 4, max: 4 } }],
    ['2..8', { arch: null, count: { min: 2, max: 8 } }],
    ['arm:8', { arch: 'arm', count: { min: 8, max: 8 } }],
    ['8:ARM', { arch: 'arm', count: { min: 8, max: 8 } }],
    ['arm', { arch: 'arm', count: { min: 2, max: null } }],
    ['x86:4..', { arch: 'x86', count: { min: 4, max: null } }],
    [{ arch: 'x86', count: '2..4' }, { arch: 'x86', count: { min: 2, max: 4 } }],
    [{ min: 4 }, { arch: null, count: { min: 4, max: null } }],
    [{ arch: 'arm' }, { arch: 'arm', count: { min: 2, max: null } }],
  ])('%j → %j', (input, expected) => {
    expect(parseCpu(input)).toEqual(expected);
  });

  it.each([
    ['x86_64:4', '"x86_64" is not a CPU architecture'],
    ['arm:x86', 'gives the CPU architecture twice'],
    ['4:8', 'gives the CPU count twice'],
    ['arm:', 'has an empty part'],
    [{ arch: 'arm', cores: 4 }, 'unknown field `cores` in `cpu`'],
    [4.5, 'expected a CPU count'],
    [null, 'expected a CPU count'],
  ])('%j is refused', (input, message) => {
    expect(refusalOf(() => parseCpu(input))).toContain(message);
  });
});

describe('gpu', () => {
  const none = { vendor: null, name: null, memory: null, total_memory: null, compute_capability: null };

  it.each([
    ['L40S', { ...none, name: ['L40S'], count: { min: 1, max: null } }],
    ['H100,A100:80GB:2', { ...none, name: ['H100', 'A100'], memory: { min: 80, max: 80 }, count: { min: 2, max: 2 } }],
    ['nvidia:2', { ...none, vendor: 'nvidia', count: { min: 2, max: 2 } }],
    ['24GB..:1..4', { ...none, memory: { min: 24, max: null }, count: { min: 1, max: 4 } }],
    ['v5litepod-8', { ...none, name: ['v5litepod-8'], count: { min: 1, max: null } }],
    ['tpu-v3-8', { ...none, name: ['v3-8'], count: { min: 1, max: null } }],
    [0, { ...none, count: { min: 0, max: 0 } }],
    [2, { ...none, count: { min: 2, max: 2 } }],
    ['tpu:8', { ...none, vendor: 'google', count: { min: 8, max: 8 } }],
    ['tt', { ...none, vendor: 'tenstorrent', count: { min: 1, max: null } }],
    ['AMD:MI300X:8', { ...none, vendor: 'amd', name: ['MI300X'], count: { min: 8, max: 8 } }],
    [{}, { ...none, count: { min: 1, max: null } }],
    [
      { vendor: 'nvidia', name: 'A100', count: '1..2', memory: '40GB..', total_memory: '80GB', compute_capability: 8 },
      {
        vendor: 'nvidia',
        name: ['A100'],
        count: { min: 1, max: 2 },
        memory: { min: 40, max: null },
        total_memory: { min: 80, max: 80 },
        compute_capability: '8.0',
      },
    ],
    [{ name: ['MI300X', 'MI325X'], compute_capability: '7.5' }, { ...none, name: ['MI300X', 'MI325X'], count: { min: 1, max: null }, compute_capability: '7.5' }],
  ])('%j → %j', (input, expected) => {
    expect(parseGpu(input)).toEqual(expected);
  });

  it.each([
    ['A100:2:3', 'gives the GPU count twice'],
    ['A100:H100', 'gives the GPU name twice'],
    ['24GB:48GB', 'gives the GPU memory twice'],
    ['nvidia:amd', 'gives the GPU vendor twice'],
    [':2', 'has an empty part'],
    ['A100,:2', 'empty GPU name'],
    ['8..4', 'minimum above its maximum'],
    [{ vendor: 'foo' }, 'unknown GPU vendor "foo"'],
    [{ foo: 1 }, 'unknown field `foo` in `gpu`'],
    [{ count: null }, 'a whole number'],
    [{ compute_capability: 'x' }, 'compute capability'],
    [true, 'expected a GPU spec'],
  ])('%j is refused', (input, message) => {
    expect(refusalOf(() => parseGpu(input))).toContain(message);
  });

  it('points a refusal inside a gpu mapping at the field', () => {
    try {
      parseGpu({ count: 'x' });
    } catch (err) {
      expect(err).toBeInstanceOf(ScalarError);
      expect((err as ScalarError).subpath).toEqual(['count']);
    }
    expect.assertions(2);
  });
});

describe('disk', () => {
  it('takes a size, a range, a {size} mapping or null', () => {
    expect(parseDisk('100GB')).toEqual({ min: 100, max: 100 });
    expect(parseDisk({ size: '50GB..1TB' })).toEqual({ min: 50, max: 1024 });
    expect(parseDisk(null)).toBeNull();
    expect(refusalOf(() => parseDisk({}))).toContain('`disk` needs `size`');
    expect(refusalOf(() => parseDisk({ size: '1GB', type: 'ssd' }))).toContain('unknown field `type` in `disk`');
  });
});

describe('resources mapping', () => {
  it('applies dstack defaults: cpu 2.., memory 8GB.., disk 100GB.., no GPU requirement', () => {
    expect(ResourcesInputSchema.parse({})).toEqual({
      cpu: { arch: null, count: { min: 2, max: null } },
      memory: { min: 8, max: null },
      shm_size: null,
      disk: { min: 100, max: null },
      gpu: { vendor: null, name: null, count: { min: 0, max: null }, memory: null, total_memory: null, compute_capability: null },
    });
    expect(ResourcesInputSchema.parse({})).toEqual(defaultResources());
  });

  it('reads every field', () => {
    const r = ResourcesInputSchema.parse({ cpu: 4, memory: '16GB..64GB', shm_size: '8GB', gpu: 'L40S', disk: null });
    expect(r.cpu.count).toEqual({ min: 4, max: 4 });
    expect(r.memory).toEqual({ min: 16, max: 64 });
    expect(r.shm_size).toBe(8);
    expect(r.gpu.name).toEqual(['L40S']);
    expect(r.disk).toBeNull();
  });

  it('takes gpu: null as no GPU requirement', () => {
    expect(ResourcesInputSchema.parse({ gpu: null }).gpu.count).toEqual({ min: 0, max: null });
  });

  it('refuses an unknown field with a hint', () => {
    const result = ResourcesInputSchema.safeParse({ gpus: 2 });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]).toMatchObject({
      code: 'unrecognized_keys',
      keys: ['gpus'],
      message: 'unknown field `gpus` in `resources` (did you mean `gpu`?)',
    });
  });
});

describe('server-side defaults', () => {
  function resources(gpu: unknown, cpu: unknown = 2): Resources {
    return ResourcesInputSchema.parse({ gpu, cpu });
  }

  it.each([
    ['L40S', null, 'nvidia'],
    ['MI300X', null, 'amd'],
    ['gaudi2', null, 'intel'],
    ['n300', null, 'tenstorrent'],
    ['v5litepod-8', null, 'google'],
    ['H100,A100', null, 'nvidia'],
    ['H100,MI300X', null, null],
    ['H100,FOO', null, null],
    ['FOO', null, null],
    [2, null, 'nvidia'],
    [2, 'my/image', null],
    ['L40S', 'my/image', 'nvidia'],
    [0, null, null],
    [null, null, 'nvidia'],
    [null, 'my/image', null],
    ['amd:2', 'my/image', 'amd'],
  ])('gpu %j with image %j → vendor %j', (gpu, image, vendor) => {
    expect(withServerDefaults(resources(gpu), image).gpu.vendor).toBe(vendor);
  });

  it('pins x86 without an image and leaves the arch unset with one', () => {
    expect(withServerDefaults(resources(null), null).cpu.arch).toBe('x86');
    expect(withServerDefaults(resources(null), 'img').cpu.arch).toBeNull();
    expect(withServerDefaults(resources(null, 'arm:4'), 'img').cpu.arch).toBe('arm');
  });

  it.each([
    ['MI300X', null, ['amd']],
    ['gaudi', null, ['intel']],
    ['tt:2', null, ['tenstorrent']],
    ['H100,MI300X', null, ['amd']],
    ['MI300X', 'rocm/pytorch', []],
    ['L40S', null, []],
    ['v5litepod-8', null, []],
    ['amd:0', null, []],
    ['FOO', null, []],
  ])('gpu %j with image %j needs an image for %j', (gpu, image, vendors) => {
    expect(vendorsNeedingImage(withServerDefaults(resources(gpu), image), image)).toEqual(vendors);
  });
});

describe('GPU vendors by name', () => {
  it('knows models case-insensitively, TPUs by generation-cores', () => {
    expect(gpuVendorsOfName('l40s')).toEqual(['nvidia']);
    expect(gpuVendorsOfName('MI355X')).toEqual(['amd']);
    expect(gpuVendorsOfName('Gaudi3')).toEqual(['intel']);
    expect(gpuVendorsOfName('p100a')).toEqual(['tenstorrent']);
    expect(gpuVendorsOfName('P100')).toEqual(['nvidia']);
    expect(gpuVendorsOfName('v6e-16')).toEqual(['google']);
    expect(gpuVendorsOfName('v6e-x')).toEqual([]);
    expect(gpuVendorsOfName('RTX9999')).toEqual([]);
  });

  it('reads vendor words and their aliases', () => {
    expect(parseGpuVendor('NVIDIA')).toBe('nvidia');
    expect(parseGpuVendor('tpu')).toBe('google');
    expect(parseGpuVendor('tt')).toBe('tenstorrent');
    expect(parseGpuVendor('A100')).toBeUndefined();
  });
});
