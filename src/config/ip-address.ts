/**
 * IP address checks for fleet configs (`internal_ip`, `network`), without Node built-ins so fleet
 * configs can be validated inside workflow code too. "Private" follows Python's `ipaddress`
 * (which dstack uses): RFC 1918, loopback, link-local and the other reserved ranges.
 */

/** The address as a big integer and its width in bits, or undefined when it is not an IP address. */
function parseAddress(text: string): { value: bigint; bits: 32 | 128 } | undefined {
  if (/^\d{1,3}(?:\.\d{1,3}){3}$/.test(text)) {
    const octets = text.split('.').map(Number);
    if (octets.some((o) => o > 255)) return undefined;
    return { value: octets.reduce((acc, o) => (acc << 8n) | BigInt(o), 0n), bits: 32 };
  }
  if (!text.includes(':') || !/^[0-9a-fA-F:.]+$/.test(text)) return undefined;
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const groups = (part: string | undefined): string[] | undefined => (part ? part.split(':') : []);
  const head = groups(halves[0]);
  const tail = groups(halves[1]);
  if (!head || !tail) return undefined;
  const expand = (list: string[]): number[] | undefined => {
    const out: number[] = [];
    for (const [i, g] of list.entries()) {
      if (i === list.length - 1 && g.includes('.')) {
        const v4 = parseAddress(g);
        if (!v4 || v4.bits !== 32) return undefined;
        out.push(Number(v4.value >> 16n), Number(v4.value & 0xffffn));
      } else if (/^[0-9a-fA-F]{1,4}$/.test(g)) out.push(parseInt(g, 16));
      else return undefined;
    }
    return out;
  };
  const left = expand(head);
  const right = expand(tail);
  if (!left || !right) return undefined;
  const missing = 8 - left.length - right.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined;
  const all = [...left, ...Array<number>(halves.length === 1 ? 0 : missing).fill(0), ...right];
  return { value: all.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n), bits: 128 };
}

const privateRanges: { bits: 32 | 128; cidr: string }[] = [
  ...['0.0.0.0/8', '10.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.0.0.0/29', '192.0.2.0/24',
    '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24', '240.0.0.0/4'].map((cidr) => ({ bits: 32 as const, cidr })),
  ...['::1/128', '::/128', 'fc00::/7', 'fe80::/10', '2001:db8::/32', '::ffff:0:0/96'].map((cidr) => ({ bits: 128 as const, cidr })),
];

function inRange(address: { value: bigint; bits: number }, cidr: string): boolean {
  const [base, prefix] = cidr.split('/');
  const start = parseAddress(base ?? '');
  if (!start || start.bits !== address.bits) return false;
  const shift = BigInt(address.bits - Number(prefix));
  return address.value >> shift === start.value >> shift;
}

export function isIpAddress(text: string): boolean {
  return parseAddress(text) !== undefined;
}

export function isPrivateIp(text: string): boolean {
  const address = parseAddress(text);
  return address !== undefined && privateRanges.some((r) => r.bits === address.bits && inRange(address, r.cidr));
}

/**
 * `<ip>/<prefix>` (or `<ip>/<netmask>`, or a bare address) as a network; host bits may be set.
 * Returns whether it parses and whether the whole network is private.
 */
export function parseNetwork(text: string): { private: boolean } | undefined {
  const [ip, mask, extra] = text.split('/');
  if (extra !== undefined || !ip) return undefined;
  const address = parseAddress(ip);
  if (!address) return undefined;
  let prefix: number = address.bits;
  if (mask !== undefined) {
    if (/^\d{1,3}$/.test(mask)) prefix = Number(mask);
    else {
      const netmask = parseAddress(mask);
      if (!netmask || netmask.bits !== address.bits) return undefined;
      const binary = netmask.value.toString(2).padStart(address.bits, '0');
      if (!/^1*0*$/.test(binary)) return undefined;
      prefix = binary.includes('0') ? binary.indexOf('0') : address.bits;
    }
    if (prefix > address.bits) return undefined;
  }
  const hostBits = BigInt(address.bits - prefix);
  const first = (address.value >> hostBits) << hostBits;
  // Private when the whole network lies inside one private range.
  const inside = privateRanges.some(
    (r) => r.bits === address.bits && prefix >= Number(r.cidr.split('/')[1]) && inRange({ value: first, bits: address.bits }, r.cidr),
  );
  return { private: inside };
}
