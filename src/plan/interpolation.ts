/**
 * `${{ groups[i].nodes[j].IP_ADDRESS }}` references in a task group's commands (`replicas[j]` in a
 * service's, as dstack reads them). Parsing is pure and shared:
 * the planner validates references (names, ranges) before anything starts, and the runner replaces
 * them with addresses once every job has one. `$${{` escapes a literal `${{`.
 */

export interface AddressReference {
  group: number;
  node: number;
  /** Offset of the `$` that opens the reference, in the command string. */
  start: number;
  /** Offset just past the closing `}}`. */
  end: number;
}

export class InterpolationError extends Error {
  override readonly name = 'InterpolationError';
  constructor(
    message: string,
    /** Offset in the command string where the problem starts. */
    readonly offset: number,
  ) {
    super(message);
  }
}

/** What a reference indexes in a group: a task's nodes, or a service's replicas. */
export type ReferenceMember = 'nodes' | 'replicas';

const referenceBodies: Record<ReferenceMember, RegExp> = {
  nodes: /^groups\[(\d+)\]\.nodes\[(\d+)\]\.IP_ADDRESS$/,
  replicas: /^groups\[(\d+)\]\.replicas\[(\d+)\]\.IP_ADDRESS$/,
};

type Segment = { kind: 'text'; text: string } | { kind: 'ref'; ref: AddressReference };

function segments(command: string, member: ReferenceMember = 'nodes'): Segment[] {
  const out: Segment[] = [];
  let text = '';
  let i = 0;
  while (i < command.length) {
    if (command.startsWith('$${{', i)) {
      text += '${{';
      i += 4;
      continue;
    }
    if (!command.startsWith('${{', i)) {
      text += command[i];
      i += 1;
      continue;
    }
    const close = command.indexOf('}}', i + 3);
    if (close === -1) throw new InterpolationError('unclosed "${{": expected "}}"', i);
    const name = command.slice(i + 3, close).trim();
    const match = referenceBodies[member].exec(name);
    if (!match) {
      throw new InterpolationError(
        `Illegal reference name "${name}": only \${{ groups[i].${member}[j].IP_ADDRESS }} can be used in commands`,
        i,
      );
    }
    if (text) out.push({ kind: 'text', text });
    text = '';
    out.push({ kind: 'ref', ref: { group: Number(match[1]), node: Number(match[2]), start: i, end: close + 2 } });
    i = close + 2;
  }
  if (text) out.push({ kind: 'text', text });
  return out;
}

/** Every address reference in the command; throws InterpolationError on a malformed one. */
export function parseReferences(command: string, member: ReferenceMember = 'nodes'): AddressReference[] {
  return segments(command, member).flatMap((s) => (s.kind === 'ref' ? [s.ref] : []));
}

/** True when the text contains `${{` that is not escaped (used to refuse references in `env`). */
export function containsReference(text: string): boolean {
  return segments(text).some((s) => s.kind === 'ref') || /(^|[^$])\$\{\{/.test(text.replaceAll('$${{', ''));
}

/**
 * Replaces every reference with the node's address. `addresses[i][j]` is the address of node j
 * of group i; a missing one is an error, never an empty string.
 */
export function interpolateCommand(command: string, addresses: readonly (readonly string[])[]): string {
  return segments(command)
    .map((s) => {
      if (s.kind === 'text') return s.text;
      const address = addresses[s.ref.group]?.[s.ref.node];
      if (!address) {
        throw new InterpolationError(
          `no address for groups[${s.ref.group}].nodes[${s.ref.node}]: that node does not exist or has no address yet`,
          s.ref.start,
        );
      }
      return address;
    })
    .join('');
}
