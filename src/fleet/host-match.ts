import type { Range, Resources } from '../config/resources-schema';
import type { HostFacts } from '../backends/ssh/detect';

/**
 * Whether a host satisfies a group's resources, and if not, why — in words a user can act on.
 * Pure: FleetWorkflow decides allocations with it, and `troupe apply` previews them with it.
 *
 * Disk: like dstack, a host offers the space that is free (available to the SSH user) on the file
 * system of its job directory, not the disk's total size; dstack compares `disk` with the free
 * space of the file system of Docker's root directory on SSH fleet hosts. So the default
 * `disk: 100GB..` needs 100 GB free there.
 */

function within(value: number, range: Range): boolean {
  return (range.min === null || value >= range.min) && (range.max === null || value <= range.max);
}

export function formatRange(range: Range, unit = ''): string {
  if (range.min !== null && range.max !== null) {
    return range.min === range.max ? `${range.min}${unit}` : `${range.min}${unit}..${range.max}${unit}`;
  }
  if (range.min !== null) return `${range.min}${unit}..`;
  if (range.max !== null) return `..${range.max}${unit}`;
  return 'any';
}

/** `cpu 2.., memory 8GB.., disk 100GB.., gpu L40S:1..`: what a group asks of each host. */
export function describeResources(resources: Resources): string {
  const { cpu, memory, disk, gpu } = resources;
  const parts = [`cpu ${cpu.arch ? `${cpu.arch}:` : ''}${formatRange(cpu.count)}`, `memory ${formatRange(memory, 'GB')}`];
  if (disk) parts.push(`disk ${formatRange(disk, 'GB')}`);
  const gpuNeeded = gpu.count.min !== null && gpu.count.min > 0;
  if (gpuNeeded || gpu.name) parts.push(`gpu ${gpu.name ? `${gpu.name.join('|')}:` : ''}${formatRange(gpu.count)}`);
  return parts.join(', ');
}

/** Every way the host falls short of the resources; empty when it fits. */
export function hostShortfalls(facts: HostFacts, resources: Resources): string[] {
  const out: string[] = [];
  const { cpu, memory, disk, gpu } = resources;
  if (cpu.arch !== null && cpu.arch !== facts.arch) out.push(`cpu arch ${facts.arch ?? facts.machine}, needs ${cpu.arch}`);
  if (!within(facts.cpus, cpu.count)) out.push(`${facts.cpus} CPUs, needs ${formatRange(cpu.count)}`);
  if (!within(facts.memory_gb, memory)) out.push(`${facts.memory_gb}GB memory, needs ${formatRange(memory, 'GB')}`);
  if (disk && !within(facts.disk_gb, disk)) out.push(`${facts.disk_gb}GB disk free, needs ${formatRange(disk, 'GB')}`);
  const count = facts.gpus.reduce((sum, g) => sum + g.count, 0);
  if (!within(count, gpu.count)) {
    const has = count > 0 ? facts.gpus.map((g) => `${g.count}× ${g.name}`).join(' + ') : 'no GPU';
    out.push(`${has}, needs ${formatRange(gpu.count)} GPU`);
    return out;
  }
  const g = facts.gpus[0];
  if (count > 0 && g) {
    if (facts.gpus.length > 1) out.push(`mixed GPUs (${facts.gpus.map((x) => x.name).join(', ')}): not supported for one job`);
    if (gpu.vendor !== null && gpu.vendor !== g.vendor) out.push(`${g.vendor} GPUs, needs ${gpu.vendor}`);
    if (gpu.name !== null && !gpu.name.some((n) => n.toLowerCase() === g.name.toLowerCase())) {
      out.push(`GPU ${g.name}, needs ${gpu.name.join(' or ')}`);
    }
    if (gpu.memory && !within(g.memory_gb, gpu.memory)) out.push(`${g.memory_gb}GB per GPU, needs ${formatRange(gpu.memory, 'GB')}`);
    if (gpu.total_memory && !within(g.memory_gb * count, gpu.total_memory)) {
      out.push(`${g.memory_gb * count}GB GPU memory in all, needs ${formatRange(gpu.total_memory, 'GB')}`);
    }
  }
  return out;
}

/** Smaller hosts first, so a CPU router does not take a GPU host that a GPU group needs. */
export function hostSize(facts: HostFacts): [number, number, number] {
  return [facts.gpus.reduce((sum, g) => sum + g.count, 0), facts.cpus, facts.memory_gb];
}

export function compareHostSize(a: HostFacts, b: HostFacts): number {
  const [x, y] = [hostSize(a), hostSize(b)];
  for (let i = 0; i < x.length; i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** What allocation needs to know of a host. */
export interface CandidateHost {
  index: number;
  status: 'probing' | 'ready' | 'unreachable';
  holder: object | null;
  facts: HostFacts | null;
}

/**
 * The hosts `count` jobs of one group would take: each the smallest free, ready host that fits
 * and is not in `taken`; null when there are not enough (all or nothing). The one rule shared by
 * FleetWorkflow's allocation and the plan's preview.
 */
export function pickHosts<H extends CandidateHost>(hosts: readonly H[], resources: Resources, count: number, taken: ReadonlySet<number>): H[] | null {
  const fitting = freeFittingHosts(hosts, resources, taken);
  return fitting.length >= count ? fitting.slice(0, count) : null;
}

/** Every free, ready host that fits and is not in `taken`, in the order pickHosts takes them. */
export function freeFittingHosts<H extends CandidateHost>(hosts: readonly H[], resources: Resources, taken: ReadonlySet<number>): H[] {
  return hosts
    .filter((h) => h.status === 'ready' && h.holder === null && h.facts !== null && !taken.has(h.index) && hostShortfalls(h.facts, resources).length === 0)
    .sort((a, b) => compareHostSize(a.facts as HostFacts, b.facts as HostFacts) || a.index - b.index);
}
