import type { HostFacts } from './detect';

export interface InternalIpConfig {
  /** Use exactly this address (it must be one of the host's). */
  internal_ip?: string | null;
  /** Use the host's address inside this IPv4 CIDR (`10.0.0.0/16`). */
  network?: string | null;
}

export class InternalIpError extends Error {
  override name = 'InternalIpError';
}

function ipv4ToNumber(address: string): number | null {
  const parts = address.split('.');
  if (parts.length !== 4) return null;
  let n = 0;
  for (const part of parts) {
    if (!/^\d{1,3}$/.test(part) || Number(part) > 255) return null;
    n = n * 256 + Number(part);
  }
  return n;
}

export function ipv4InCidr(address: string, cidr: string): boolean {
  const [base, bitsText] = cidr.split('/');
  const bits = Number(bitsText ?? '32');
  const a = ipv4ToNumber(address);
  const b = ipv4ToNumber(base ?? '');
  if (a === null || b === null || !Number.isInteger(bits) || bits < 0 || bits > 32) return false;
  const size = 2 ** (32 - bits);
  return Math.floor(a / size) === Math.floor(b / size);
}

const PRIVATE_RANGES = ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'];
/**
 * Bridges of container runtimes and VMs, and the loopback device (a service or anycast address put on
 * `lo`): private, but not how other hosts reach this one. Still usable when named as `internal_ip`.
 */
const VIRTUAL_INTERFACES = /^(lo$|docker\d*|br-|virbr|cni|podman|cali|flannel|veth|lxcbr|lxdbr)/;

/**
 * The address peers use to reach this host: `internal_ip` when given (checked against the host's
 * addresses), else the host's address inside `network`, else its first private IPv4 address on a
 * non-virtual interface. Throws InternalIpError naming what the host has when none fits.
 */
export function pickInternalIp(facts: Pick<HostFacts, 'addresses'>, config: InternalIpConfig = {}): string {
  const listed = facts.addresses.map((a) => `${a.address}${a.interface ? ` (${a.interface})` : ''}`).join(', ') || 'none';
  if (config.internal_ip) {
    if (facts.addresses.some((a) => a.address === config.internal_ip)) return config.internal_ip;
    throw new InternalIpError(`internal_ip ${config.internal_ip} is not an address of the host (it has: ${listed})`);
  }
  if (config.network) {
    const [base, bits] = config.network.split('/');
    if (ipv4ToNumber(base ?? '') === null || bits === undefined || !/^\d+$/.test(bits) || Number(bits) > 32) {
      throw new InternalIpError(`network ${config.network} is not an IPv4 CIDR such as 10.0.0.0/16`);
    }
    const inside = facts.addresses.find((a) => a.family === 'ipv4' && ipv4InCidr(a.address, config.network as string));
    if (inside) return inside.address;
    throw new InternalIpError(`the host has no address in network ${config.network} (it has: ${listed})`);
  }
  const candidates = facts.addresses.filter(
    (a) => a.family === 'ipv4' && !VIRTUAL_INTERFACES.test(a.interface) && PRIVATE_RANGES.some((r) => ipv4InCidr(a.address, r)),
  );
  const first = candidates[0];
  if (first) return first.address;
  throw new InternalIpError(`the host has no private IPv4 address (it has: ${listed}); set internal_ip or network for it`);
}
