import type { ReadyProbe } from '../plan/plan-schema';
import { quoteShellWord } from './shell-quote';

/**
 * The bash script that probes one node for readiness, run ON the node (through the runner):
 * exit 0 when ready; otherwise one line saying what it saw. Plain bash (`/dev/tcp`), so it needs
 * neither curl nor python on the node.
 */
export function renderProbeScript(probe: ReadyProbe, address: string): string {
  const check = probe.check;
  if (check.kind === 'command') return check.command;
  const target = check.kind === 'http' ? `http://${address}:${check.port}${check.path}` : `tcp://${address}:${check.port}`;
  const lines = [
    `addr=${quoteShellWord(address)}; port=${check.port}; target=${quoteShellWord(target)}`,
    'if ! { exec 3<>"/dev/tcp/$addr/$port"; } 2>/dev/null; then echo "$target → connection refused"; exit 1; fi',
  ];
  if (check.kind === 'tcp') return [...lines, 'exit 0'].join('\n');
  return [...lines, ...renderHttpRequest(check), ...READ_STATUS].join('\n');
}

const READ_STATUS = [
  'IFS= read -r status <&3 || { echo "$target → no response"; exit 1; }',
  'code=$(printf %s "$status" | cut -d" " -f2)',
  'case "$code" in 2??) exit 0 ;; *) echo "$target → HTTP $code"; exit 1 ;; esac',
];

/** One line of a request: no CR or LF may end it early (a header value could carry them). */
const oneLine = (text: string): string => text.replace(/[\r\n]+/g, ' ');

/**
 * The request, written to fd 3 with printf: every value is a quoted word, never code. HTTP/1.0 with
 * `Connection: close`: the answer's status line is all the probe reads.
 */
function renderHttpRequest(check: Extract<ReadyProbe['check'], { kind: 'http' }>): string[] {
  const requestLine = `${check.method ?? 'GET'} ${oneLine(check.path).replace(/ /g, '%20')} HTTP/1.0`;
  const headers = ['Connection: close', ...(check.headers ?? []).map((h) => `${oneLine(h.name)}: ${oneLine(h.value)}`)];
  const body = check.body ?? null;
  if (body !== null) headers.push(`Content-Length: ${Buffer.byteLength(body, 'utf8')}`);
  return [
    '{',
    `  printf '%s\\r\\nHost: %s:%s\\r\\n' ${quoteShellWord(requestLine)} "$addr" "$port"`,
    `  printf '%s\\r\\n' ${headers.map(quoteShellWord).join(' ')}`,
    "  printf '\\r\\n'",
    ...(body === null ? [] : [`  printf %s ${quoteShellWord(body)}`]),
    '} >&3',
  ];
}

/** How the probe reads in messages: `http://10.0.0.7:8000/health`, `tcp://…`, or the command. */
export function describeProbe(probe: ReadyProbe, address: string): string {
  const check = probe.check;
  if (check.kind === 'http') return `http://${address}:${check.port}${check.path}`;
  if (check.kind === 'tcp') return `tcp://${address}:${check.port}`;
  return `\`${check.command}\``;
}

/** What a failed probe attempt answered, for "not ready after …: <answer>" (exit code 124 is a probe that timed out). */
export function describeProbeAnswer(probe: ReadyProbe, address: string, outcome: { exit_code: number; output: string } | { error: unknown }): string {
  const what = describeProbe(probe, address);
  if ('error' in outcome) return `${what} → ${outcome.error instanceof Error ? outcome.error.message : String(outcome.error)}`;
  if (outcome.exit_code === 124) return `${what} → timed out`;
  return outcome.output.trim() || `${what} → exit code ${outcome.exit_code}`;
}
