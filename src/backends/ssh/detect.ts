import { z } from 'zod';
import { GpuVendorSchema } from '../../config/resources-schema';
import { SshCommandError } from './errors';
import { AMD_SMI_QUERY, NVIDIA_SMI_QUERY, parseAmdSmi, parseNvidiaSmi, parseRocmSmi, ROCM_SMI_QUERY } from './gpu-tools';
import type { SshSession } from './session';
import { quoteShellWord } from '../../runner/shell-quote';

export const HostAddressSchema = z.object({
  /** Interface name; empty when only `hostname -I` was available. */
  interface: z.string(),
  address: z.string(),
  prefix: z.number().int().nullable(),
  family: z.enum(['ipv4', 'ipv6']),
});
export type HostAddress = z.infer<typeof HostAddressSchema>;

export const HostFactsSchema = z.object({
  /** `uname -m` (x86_64, aarch64). */
  machine: z.string(),
  arch: z.enum(['x86', 'arm']).nullable(),
  cpus: z.number().int().positive(),
  memory_gb: z.number().nonnegative(),
  /** Free space in the file system that holds the job base directory (or its nearest existing parent). */
  disk_gb: z.number().nonnegative(),
  /** The SSH user's home directory (the default job base directory lives under it). */
  home: z.string(),
  gpus: z.array(
    z.object({
      vendor: GpuVendorSchema.extract(['nvidia', 'amd']),
      name: z.string(),
      raw_name: z.string(),
      memory_mib: z.number().nonnegative(),
      memory_gb: z.number().nonnegative(),
      count: z.number().int().positive(),
    }),
  ),
  /** Global-scope addresses, loopback and link-local left out, in the order the host lists them. */
  addresses: z.array(HostAddressSchema),
  /** A container runtime whose daemon answers (for `image:`), or null. */
  container_runtime: z.enum(['docker', 'podman']).nullable(),
});
export type HostFacts = z.infer<typeof HostFactsSchema>;

export function gpuCount(facts: HostFacts): number {
  return facts.gpus.reduce((sum, g) => sum + g.count, 0);
}

/** The default job base directory for a host: under the SSH user's home. */
export function defaultJobBaseDir(facts: Pick<HostFacts, 'home'>): string {
  return `${facts.home.replace(/\/+$/, '')}/.troupe/jobs`;
}

const SECTION = '@@troupe:';

/**
 * One round trip: every probe prints under its own marker. GPU tools are tried in order
 * (nvidia-smi, then amd-smi, then rocm-smi); a tool that is missing or prints no GPU is skipped.
 */
export function detectScript(baseDir: string): string {
  const s = (name: string) => `echo '${SECTION}${name}'`;
  return [
    'export LC_ALL=C',
    s('machine'), 'uname -m',
    s('cpus'), 'nproc 2>/dev/null || getconf _NPROCESSORS_ONLN',
    s('meminfo'), 'grep -E "^MemTotal:" /proc/meminfo',
    s('home'), 'printf "%s\\n" "$HOME"',
    s('df'),
    `d=${quoteShellWord(baseDir)}; case "$d" in /*) ;; *) d="$HOME/$d" ;; esac`,
    'while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done',
    'df -Pk "$d" | tail -n 1',
    s('ip'), 'ip -o addr show 2>/dev/null',
    s('hostname-i'), 'hostname -I 2>/dev/null',
    s('nvidia-smi'), `command -v nvidia-smi >/dev/null 2>&1 && ${NVIDIA_SMI_QUERY} 2>/dev/null`,
    s('amd-smi'), `command -v amd-smi >/dev/null 2>&1 && ${AMD_SMI_QUERY} 2>/dev/null`,
    s('rocm-smi'), `command -v rocm-smi >/dev/null 2>&1 && ${ROCM_SMI_QUERY} 2>/dev/null`,
    s('runtime'),
    'if command -v docker >/dev/null 2>&1 && timeout 10 docker version --format "{{.Server.Version}}" >/dev/null 2>&1; then echo docker;',
    'elif command -v podman >/dev/null 2>&1 && timeout 10 podman version >/dev/null 2>&1; then echo podman; fi',
    s('end'),
    'true',
  ].join('\n');
}

function sections(output: string): Map<string, string> {
  const out = new Map<string, string>();
  let current: string | null = null;
  let lines: string[] = [];
  for (const line of output.split('\n')) {
    if (line.startsWith(SECTION)) {
      if (current !== null) out.set(current, lines.join('\n'));
      current = line.slice(SECTION.length).trim();
      lines = [];
    } else if (current !== null) {
      lines.push(line);
    }
  }
  if (current !== null) out.set(current, lines.join('\n'));
  return out;
}

function parseAddresses(ipOutput: string, hostnameI: string): HostAddress[] {
  const out: HostAddress[] = [];
  for (const line of ipOutput.split('\n')) {
    // "2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\       valid_lft ..."
    const match = /^\d+:\s+(\S+?)(?:@\S+)?\s+(inet6?)\s+([0-9a-fA-F.:]+)\/(\d+)\s.*?scope\s+(\S+)/.exec(line);
    if (!match) continue;
    const [, iface, family, address, prefix, scope] = match;
    if (scope !== 'global' || !iface || !address) continue;
    out.push({ interface: iface, address, prefix: Number(prefix), family: family === 'inet6' ? 'ipv6' : 'ipv4' });
  }
  if (out.length > 0 || !hostnameI.trim()) return out;
  return hostnameI
    .trim()
    .split(/\s+/)
    .filter((a) => !a.toLowerCase().startsWith('fe80:'))
    .map((address) => ({ interface: '', address, prefix: null, family: address.includes(':') ? 'ipv6' : 'ipv4' }) as const);
}

/** Pure: the facts in the detect script's output. Throws when a required probe printed nothing usable. */
export function parseHostFacts(output: string): HostFacts {
  const s = sections(output);
  const get = (name: string): string => (s.get(name) ?? '').trim();
  if (!s.has('end')) throw new Error('detection output is incomplete');
  const machine = get('machine');
  const cpus = Number(get('cpus').split('\n')[0]);
  const memKb = Number(/MemTotal:\s+(\d+)/.exec(get('meminfo'))?.[1]);
  const dfFields = get('df').split(/\s+/);
  const availKb = Number(dfFields[3]);
  if (!machine || !Number.isInteger(cpus) || cpus <= 0 || !Number.isFinite(memKb)) {
    throw new Error(`cannot read CPUs/memory from the host (uname: "${machine}", nproc: "${get('cpus')}", meminfo: "${get('meminfo')}")`);
  }
  const nvidia = parseNvidiaSmi(get('nvidia-smi'));
  const gpus = nvidia.length > 0 ? nvidia : parseAmdSmi(get('amd-smi'));
  const runtime = get('runtime');
  return {
    machine,
    arch: /^(x86_64|amd64|i[3-6]86)$/.test(machine) ? 'x86' : /^(aarch64|arm64|armv\d.*)$/.test(machine) ? 'arm' : null,
    cpus,
    memory_gb: Math.round((memKb / 1048576) * 10) / 10,
    disk_gb: Number.isFinite(availKb) ? Math.round((availKb / 1048576) * 10) / 10 : 0,
    home: get('home'),
    gpus: gpus.length > 0 ? gpus : parseRocmSmi(get('rocm-smi')),
    addresses: parseAddresses(get('ip'), get('hostname-i')),
    container_runtime: runtime === 'docker' || runtime === 'podman' ? runtime : null,
  };
}

export interface DetectOptions {
  /** Job base directory whose file system's free space is reported; relative means under $HOME. */
  baseDir?: string;
  timeoutMs?: number;
}

/** CPUs, memory, disk, GPUs, arch, addresses and container runtime of the host, in one command. */
export async function detectHost(session: SshSession, options: DetectOptions = {}): Promise<HostFacts> {
  const result = await session.exec(detectScript(options.baseDir ?? '.troupe/jobs'), { timeoutMs: options.timeoutMs });
  if (result.exitCode !== 0) throw new SshCommandError(session.host, 'host detection', result.exitCode, result.stderr);
  try {
    return parseHostFacts(result.stdout);
  } catch (err) {
    throw new SshCommandError(session.host, `host detection (${(err as Error).message})`, result.exitCode, result.stderr);
  }
}
