/** IPv4 subnets and the addresses a local fleet hands out from one. */

export interface Subnet {
  /** Network address as an unsigned 32-bit number. */
  base: number;
  prefix: number;
}

export function ipToNumber(ip: string): number {
  const parts = ip.split('.');
  if (parts.length !== 4 || parts.some((p) => !/^\d{1,3}$/.test(p) || Number(p) > 255)) {
    throw new Error(`"${ip}" is not an IPv4 address`);
  }
  return parts.reduce((n, p) => n * 256 + Number(p), 0);
}

export function numberToIp(n: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(n / 2 ** shift) % 256).join('.');
}

/** `10.213.0.0/16` → its network address and prefix; refuses host bits and odd prefixes. */
export function parseSubnet(cidr: string): Subnet {
  const match = /^([\d.]+)\/(\d{1,2})$/.exec(cidr);
  if (!match) throw new Error(`subnet "${cidr}" is not of the form a.b.c.d/prefix`);
  const prefix = Number(match[2]);
  if (prefix < 8 || prefix > 30) throw new Error(`subnet "${cidr}": the prefix must be between 8 and 30`);
  const base = ipToNumber(match[1] ?? '');
  if (base % 2 ** (32 - prefix) !== 0) throw new Error(`subnet "${cidr}" has host bits set`);
  return { base, prefix };
}

export function subnetSize(subnet: Subnet): number {
  return 2 ** (32 - subnet.prefix);
}

export function subnetContains(outer: Subnet, inner: Subnet): boolean {
  return inner.prefix >= outer.prefix && inner.base >= outer.base && inner.base + subnetSize(inner) <= outer.base + subnetSize(outer);
}

/**
 * The addresses a fleet may hand out, in order: the subnet's hosts without its network and
 * broadcast addresses and without `reserved` (the bridge's own address), at most `limit` of them
 * (the fleet's capacity: only the first `limit` addresses can ever be leased, so capacity holds
 * across processes as address leases do).
 */
export function poolAddresses(subnet: Subnet, reserved: readonly string[], limit: number | null): string[] {
  const skip = new Set(reserved);
  const out: string[] = [];
  const last = subnet.base + subnetSize(subnet) - 1;
  for (let n = subnet.base + 1; n < last; n += 1) {
    if (limit !== null && out.length >= limit) break;
    const ip = numberToIp(n);
    if (!skip.has(ip)) out.push(ip);
  }
  return out;
}
