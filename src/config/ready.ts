import type { ReadyProbe, ReadyQuorum } from '../plan/plan-schema';
import { parseDuration } from './duration';
import { ScalarError, toInt, toText, within } from './scalars';
import { describeValue } from './yaml-source';

/**
 * `ready:` of a group (Troupe's extension to dstack's format): how to tell that a node is ready.
 *
 *   ready:
 *     http: {port: 8000, path: /health}   # a GET answered 2xx (or `http: 8000` for path /)
 *     tcp: 8000                           # or: a connection accepted
 *     command: test -e /tmp/warm          # or: exit status 0
 *     interval: 2s                        # between probes of one node (default 2s)
 *     timeout: 10m                        # after its commands start (default 10m)
 *     min: 2                              # quorum: dependents start once 2 nodes (or "50%") are READY
 *
 * `ready: {min: K}` alone is a quorum without a probe: a node counts as ready once it runs.
 */
export const DEFAULT_READY_INTERVAL_S = 2;
export const DEFAULT_READY_TIMEOUT_S = 600;

const PROBES = ['http', 'tcp', 'command'];
const TIMINGS = ['interval', 'timeout'];
const FIELDS = [...PROBES, ...TIMINGS, 'min'];

/** `ready:` as written: a probe, a quorum, or both. */
export interface ReadyInput {
  probe: ReadyProbe | null;
  min: ReadyQuorum | null;
}

function port(value: unknown): number {
  const n = toInt(value);
  if (n === undefined || n < 1 || n > 65535) throw new ScalarError(`expected a port number 1..65535, got ${describeValue(value)}`);
  return n;
}

/** Probe timings may be fractional (`0.5s`, `500ms`, `0.5`), unlike dstack's whole-second durations. */
function positiveSeconds(value: unknown): number {
  const fractional = typeof value === 'string' ? /^(\d+(?:\.\d+)?) *(ms|s)$/.exec(value) : null;
  const seconds = fractional
    ? Number(fractional[1]) / (fractional[2] === 'ms' ? 1000 : 1)
    : typeof value === 'number' ? value : parseDuration(value);
  if (!(seconds > 0)) throw new ScalarError(`must be more than 0 seconds, got ${describeValue(value)}`);
  // Node's timers hold at most ~24.8 days; a probe window longer than a day is a mistake anyway.
  if (!(seconds <= 86_400)) throw new ScalarError(`must be at most 1 day (86400s), got ${describeValue(value)}`);
  return seconds;
}

function httpCheck(value: unknown): ReadyProbe['check'] {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return { kind: 'http', port: port(value), path: '/' };
  const mapping = value as Record<string, unknown>;
  const extra = Object.keys(mapping).find((k) => k !== 'port' && k !== 'path');
  if (extra !== undefined) throw new ScalarError(`unknown field \`${extra}\` in \`http\`: expected \`port\` and \`path\``, [extra], 'key');
  const path = mapping.path === undefined ? '/' : toText(mapping.path);
  if (path === undefined || !path.startsWith('/') || /[\s\r\n]/.test(path)) {
    throw new ScalarError(`expected a URL path starting with / and without spaces, got ${describeValue(mapping.path)}`, ['path']);
  }
  return { kind: 'http', port: within('port', () => port(mapping.port)), path };
}

export function parseReady(value: unknown): ReadyInput {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new ScalarError(`expected a mapping with one of \`http\`, \`tcp\` or \`command\`, and/or \`min\`, got ${describeValue(value)}`);
  }
  const mapping = value as Record<string, unknown>;
  const extra = Object.keys(mapping).find((k) => !FIELDS.includes(k));
  if (extra !== undefined) {
    throw new ScalarError(`unknown field \`${extra}\` in \`ready\`: expected one of http, tcp, command, and interval, timeout, min`, [extra], 'key');
  }
  const given = (k: string) => mapping[k] !== undefined && mapping[k] !== null;
  const min = given('min') ? within('min', () => parseReadyQuorum(mapping.min)) : null;
  if (min !== null && !PROBES.some(given)) {
    const timing = TIMINGS.find(given);
    if (timing !== undefined) {
      throw new ScalarError(`\`${timing}\` times a probe, and \`ready\` has none: add one of \`http\`, \`tcp\` or \`command\`, or remove it`, [timing], 'key');
    }
    return { probe: null, min };
  }
  return { probe: parseReadyProbe(mapping), min };
}

/** `min: 2` or `min: "50%"`: how many of the group's nodes must be READY before its dependents start. */
export function parseReadyQuorum(value: unknown): ReadyQuorum {
  const percent = typeof value === 'string' ? /^\s*(\d+)\s*%\s*$/.exec(value) : null;
  if (percent) {
    const n = Number(percent[1]);
    if (n < 1 || n > 100) throw new ScalarError(`a percentage of the group's nodes must be 1%..100%, got ${describeValue(value)}`);
    return { kind: 'percent', value: n };
  }
  const n = toInt(value);
  if (n === undefined || n < 1) throw new ScalarError(`expected a number of nodes (1 or more) or a percentage such as "50%", got ${describeValue(value)}`);
  return { kind: 'count', value: n };
}

/** The probe of a `ready:` mapping whose fields are known to be valid. */
function parseReadyProbe(mapping: Record<string, unknown>): ReadyProbe {
  const kinds = PROBES.filter((k) => mapping[k] !== undefined && mapping[k] !== null);
  if (kinds.length !== 1) {
    throw new ScalarError(
      kinds.length === 0 ? '`ready` needs one of `http`, `tcp` or `command`' : `\`ready\` takes one of ${kinds.join(', ')}, not several`,
    );
  }
  let check: ReadyProbe['check'];
  if (kinds[0] === 'http') check = within('http', () => httpCheck(mapping.http));
  else if (kinds[0] === 'tcp') check = { kind: 'tcp', port: within('tcp', () => port(mapping.tcp)) };
  else {
    const command = toText(mapping.command);
    if (command === undefined || command.trim() === '') throw new ScalarError('expected a command to run', ['command']);
    check = { kind: 'command', command };
  }
  return {
    check,
    interval_s: mapping.interval === undefined ? DEFAULT_READY_INTERVAL_S : within('interval', () => positiveSeconds(mapping.interval)),
    timeout_s: mapping.timeout === undefined ? DEFAULT_READY_TIMEOUT_S : within('timeout', () => positiveSeconds(mapping.timeout)),
  };
}
