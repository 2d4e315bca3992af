import { z } from 'zod';
import type { PortMappingSchema } from '../plan/plan-schema';
import { ScalarError, toInt, within } from './scalars';
import { describeValue } from './yaml-source';

export type PortMapping = z.infer<typeof PortMappingSchema>;

/**
 * A port to expose: `8000` (same port locally), `"8080:8000"` (local:container), `"*:8000"` (any
 * free local port), or `{container_port, local_port}`. Ports are 1..65535.
 */
function port(value: unknown, what: string): number {
  const n = toInt(value);
  if (n === undefined || n < 1 || n > 65535) throw new ScalarError(`${what} must be a port number 1..65535, got ${describeValue(value)}`);
  return n;
}

export function parsePort(value: unknown): PortMapping {
  if (typeof value === 'number') {
    const p = port(value, 'the port');
    return { container_port: p, local_port: p };
  }
  if (typeof value === 'string') {
    const match = /^(?:(\d+|\*):)?(\d+)$/.exec(value);
    if (!match) throw new ScalarError(`expected a port such as 8000, "8080:8000" or "*:8000", got ${describeValue(value)}`);
    const container = port(match[2], 'the container port');
    const local = match[1] === undefined ? container : match[1] === '*' ? null : port(match[1], 'the local port');
    return { container_port: container, local_port: local };
  }
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const obj = value as Record<string, unknown>;
    const extra = Object.keys(obj).find((k) => k !== 'container_port' && k !== 'local_port');
    if (extra !== undefined) {
      throw new ScalarError(`unknown field \`${extra}\` in a port: expected \`container_port\` and \`local_port\``, [extra], 'key');
    }
    if (obj.container_port === undefined) throw new ScalarError('a port mapping needs `container_port`');
    return {
      container_port: within('container_port', () => port(obj.container_port, '`container_port`')),
      local_port:
        obj.local_port === undefined || obj.local_port === null ? null : within('local_port', () => port(obj.local_port, '`local_port`')),
    };
  }
  throw new ScalarError(`expected a port such as 8000, "8080:8000" or "*:8000", got ${describeValue(value)}`);
}
