import type { GpuVendor } from '../../config/resources-schema';

/** One kind of GPU on a host (hosts with mixed models get one entry per model). */
export interface GpuFacts {
  vendor: Extract<GpuVendor, 'nvidia' | 'amd'>;
  /** Model as resources name it (`L40S`, `H100`, `MI300X`). */
  name: string;
  /** What the vendor tool printed (`NVIDIA H100 80GB HBM3`). */
  raw_name: string;
  memory_mib: number;
  /** memory_mib / 1024, one decimal. */
  memory_gb: number;
  count: number;
}

/** The query detection makes; the test harness's fake nvidia-smi answers exactly this. */
export const NVIDIA_SMI_QUERY = 'nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits';
export const AMD_SMI_QUERY = 'amd-smi static --asic --vram --json';
export const ROCM_SMI_QUERY = 'rocm-smi --showproductname --showmeminfo vram --json';

const VENDOR_WORDS = /^(nvidia|tesla|geforce|quadro|amd|instinct|radeon|ati)$/i;

/**
 * The model name resources use: vendor and family words dropped, then the first word up to a
 * `-` (`A100-SXM4-80GB` → `A100`), with `RTX` joined to its number (`RTX 4090` → `RTX4090`)
 * and an `NVL` suffix kept (`H100 NVL` → `H100NVL`). Memory sizes and form factors are dropped.
 */
export function normalizeGpuName(raw: string): string {
  const words = raw.replace(/\(.*?\)/g, ' ').trim().split(/\s+/).filter((w) => w && !VENDOR_WORDS.test(w));
  if (words.length === 0) return raw.trim();
  let name = (words[0] ?? '').split('-')[0] ?? '';
  let rest = words.slice(1);
  if (/^rtx$/i.test(name) && rest[0]) {
    name = `RTX${(rest[0].split('-')[0] ?? '').toUpperCase()}`;
    rest = rest.slice(1);
  }
  if (rest[0] && /^nvl$/i.test(rest[0])) name += 'NVL';
  return name.toUpperCase();
}

function group(vendor: GpuFacts['vendor'], devices: Array<{ raw: string; mib: number }>): GpuFacts[] {
  const byModel = new Map<string, GpuFacts>();
  for (const d of devices) {
    const key = `${d.raw}\0${d.mib}`;
    const known = byModel.get(key);
    if (known) known.count += 1;
    else {
      byModel.set(key, {
        vendor,
        name: normalizeGpuName(d.raw),
        raw_name: d.raw,
        memory_mib: d.mib,
        memory_gb: Math.round((d.mib / 1024) * 10) / 10,
        count: 1,
      });
    }
  }
  return [...byModel.values()];
}

/** Lines `NVIDIA L40S, 46068` (name, MiB). Anything else (e.g. "No devices were found") means no GPU. */
export function parseNvidiaSmi(output: string): GpuFacts[] {
  const devices: Array<{ raw: string; mib: number }> = [];
  for (const line of output.split('\n')) {
    const match = /^(.+),\s*(\d+)\s*$/.exec(line.trim());
    if (match?.[1] && match[2]) devices.push({ raw: match[1].trim(), mib: Number(match[2]) });
  }
  return group('nvidia', devices);
}

function mibOf(size: unknown): number | null {
  if (typeof size === 'number') return size;
  let value: number;
  let unit: string;
  if (typeof size === 'string') {
    const match = /^\s*([\d.]+)\s*([A-Za-z]*)\s*$/.exec(size);
    if (!match) return null;
    value = Number(match[1]);
    unit = match[2] ?? 'MB';
  } else if (size && typeof size === 'object' && 'value' in size) {
    value = Number((size as { value: unknown }).value);
    unit = String((size as { unit?: unknown }).unit ?? 'MB');
  } else {
    return null;
  }
  if (!Number.isFinite(value)) return null;
  // amd-smi's "MB" is MiB.
  const factor: Record<string, number> = { B: 1 / 1048576, KB: 1 / 1024, MB: 1, MIB: 1, GB: 1024, GIB: 1024 };
  const f = factor[unit.toUpperCase() || 'MB'];
  return f === undefined ? null : Math.round(value * f);
}

/** `amd-smi static --asic --vram --json`: a list of devices (ROCm 6) or `{ gpu_data: [...] }` (later). */
export function parseAmdSmi(output: string): GpuFacts[] {
  let data: unknown;
  try {
    data = JSON.parse(output);
  } catch {
    return [];
  }
  const list = Array.isArray(data) ? data : (data as { gpu_data?: unknown })?.gpu_data;
  if (!Array.isArray(list)) return [];
  const devices: Array<{ raw: string; mib: number }> = [];
  for (const entry of list as Array<{ asic?: { market_name?: unknown }; vram?: { size?: unknown } }>) {
    const raw = entry.asic?.market_name;
    const mib = mibOf(entry.vram?.size);
    if (typeof raw === 'string' && raw && raw !== 'N/A') devices.push({ raw, mib: mib ?? 0 });
  }
  return group('amd', devices);
}

/** `rocm-smi --showproductname --showmeminfo vram --json`: `{ card0: { "Card Series": ..., "VRAM Total Memory (B)": ... } }`. */
export function parseRocmSmi(output: string): GpuFacts[] {
  let data: unknown;
  try {
    data = JSON.parse(output);
  } catch {
    return [];
  }
  if (!data || typeof data !== 'object') return [];
  const devices: Array<{ raw: string; mib: number }> = [];
  for (const [card, fields] of Object.entries(data as Record<string, Record<string, unknown>>)) {
    if (!/^card\d+$/.test(card) || !fields || typeof fields !== 'object') continue;
    const raw = fields['Card Series'] ?? fields['Card series'] ?? fields['Card SKU'];
    const bytes = Number(fields['VRAM Total Memory (B)']);
    if (typeof raw === 'string' && raw) devices.push({ raw, mib: Number.isFinite(bytes) ? Math.round(bytes / 1048576) : 0 });
  }
  return group('amd', devices);
}
