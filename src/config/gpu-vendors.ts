import type { GpuVendor } from './resources-schema';

/**
 * Accelerator models by vendor, for inferring `gpu.vendor` from names the way dstack does
 * (its list comes from the gpuhunt catalogue, checked against gpuhunt 0.1.30). Names compare
 * case-insensitively. A name in no list is unknown: it never makes a config invalid by itself.
 */
const knownModels: Record<Exclude<GpuVendor, 'google'>, readonly string[]> = {
  nvidia: [
    'A10', 'A100', 'A10G', 'A16', 'A40', 'A4000', 'A4500', 'A5000', 'A6000', 'B200', 'B300', 'GB200', 'GH200',
    'H100', 'H100NVL', 'H200', 'H200NVL', 'L4', 'L40', 'L40S', 'P100', 'RTX2000Ada', 'RTX2060', 'RTX2060SUPER',
    'RTX2070', 'RTX2070SUPER', 'RTX2080', 'RTX2080SUPER', 'RTX2080Ti', 'RTX3050', 'RTX3060', 'RTX3060Ti', 'RTX3070',
    'RTX3070Ti', 'RTX3080', 'RTX3080Ti', 'RTX3090', 'RTX3090Ti', 'RTX4000Ada', 'RTX4060', 'RTX4060Ti', 'RTX4070',
    'RTX4070SUPER', 'RTX4070Ti', 'RTX4070TiSUPER', 'RTX4080', 'RTX4080SUPER', 'RTX4090', 'RTX5060', 'RTX5060Ti',
    'RTX5070', 'RTX5070Ti', 'RTX5080', 'RTX5090', 'RTX6000', 'RTX6000Ada', 'RTXPRO4500', 'RTXPRO6000', 'T4', 'V100',
  ],
  amd: ['MI100', 'MI210', 'MI250', 'MI250X', 'MI300A', 'MI300X', 'MI308X', 'MI325X', 'MI350X', 'MI355X'],
  intel: ['Gaudi', 'Gaudi2', 'Gaudi3'],
  tenstorrent: ['n150', 'n300', 'p100a', 'p150', 'p300', 'tt-galaxy-bh', 'tt-galaxy-wh'],
};

/** TPU generations; a TPU is named `<generation>-<cores>`, e.g. `v5litepod-8`. */
const tpuGenerations = ['v2', 'v3', 'v4', 'v5litepod', 'v5p', 'v6e'];

const vendorByModel = new Map<string, GpuVendor[]>();
for (const [vendor, models] of Object.entries(knownModels) as [GpuVendor, readonly string[]][]) {
  for (const model of models) {
    const key = model.toLowerCase();
    vendorByModel.set(key, [...(vendorByModel.get(key) ?? []), vendor]);
  }
}

/** The vendors a GPU name belongs to; empty when the name is unknown. */
export function gpuVendorsOfName(name: string): GpuVendor[] {
  const lower = name.toLowerCase();
  const vendors = new Set<GpuVendor>(vendorByModel.get(lower) ?? []);
  const dash = lower.indexOf('-');
  if (dash !== -1 && /^\d+$/.test(lower.slice(dash + 1)) && tpuGenerations.includes(lower.slice(0, dash))) {
    vendors.add('google');
  }
  return [...vendors];
}

/** The vendor a `gpu:` token names (`nvidia`, `AMD`, `tpu`, `tt`…), or undefined. */
export function parseGpuVendor(token: string): GpuVendor | undefined {
  const lower = token.toLowerCase();
  if (lower === 'tpu') return 'google';
  if (lower === 'tt') return 'tenstorrent';
  const vendors: readonly GpuVendor[] = ['nvidia', 'amd', 'google', 'intel', 'tenstorrent'];
  return vendors.find((v) => v === lower);
}
