import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors';
import { loadPlan } from '../../src/plan';
import { thrownBy } from '../helpers/refusal';

/** `depends_on` and `ready` (Troupe's extensions): parsing, defaults and every refusal. */

function yaml(...lines: string[]): string {
  return `${lines.join('\n')}\n`;
}

const load = (text: string) => loadPlan(text, 'task.yml', { environ: {}, runName: 'deps-run' });

function refusal(text: string): string {
  const { message } = thrownBy(() => load(text), ConfigError);
  expect(message).not.toContain('\n');
  return message;
}

const pd = (router: string[], prefill: string[] = [], extra: string[] = []) =>
  yaml(
    'type: task',
    ...extra,
    'groups:',
    '  - name: router',
    '    commands: [route]',
    ...router.map((l) => `    ${l}`),
    '  - name: prefill',
    '    commands: [serve]',
    ...prefill.map((l) => `    ${l}`),
    '  - name: decode',
    '    commands: [serve]',
  );

describe('depends_on and ready', () => {
  it('maps names to group indices and fills probe defaults', () => {
    const plan = load(pd(['depends_on: [prefill, decode]'], ['ready:', '  http: {port: 8000, path: /health}', '  timeout: 5m']));
    expect(plan.groups.map((g) => g.depends_on)).toEqual([[1, 2], [], []]);
    expect(plan.groups[1]?.ready).toEqual({ check: { kind: 'http', port: 8000, path: '/health' }, interval_s: 2, timeout_s: 300 });
    expect(plan.groups[0]?.ready).toBeNull();
  });

  it('takes http: PORT, tcp and command probes', () => {
    expect(load(pd([], ['ready: {http: 8000}'])).groups[1]?.ready?.check).toEqual({ kind: 'http', port: 8000, path: '/' });
    expect(load(pd([], ['ready: {tcp: 5000, interval: 1s}'])).groups[1]?.ready).toEqual({
      check: { kind: 'tcp', port: 5000 },
      interval_s: 1,
      timeout_s: 600,
    });
    expect(load(pd([], ['ready: {command: "test -e /tmp/warm"}'])).groups[1]?.ready?.check).toEqual({
      kind: 'command',
      command: 'test -e /tmp/warm',
    });
  });

  it('refuses a cycle at plan time, naming it', () => {
    const text = yaml(
      'type: task',
      'groups:',
      '  - name: a',
      '    commands: [x]',
      '    depends_on: [c]',
      '  - name: b',
      '    commands: [x]',
      '    depends_on: [a]',
      '  - name: c',
      '    commands: [x]',
      '    depends_on: [b]',
    );
    expect(refusal(text)).toBe('task.yml:5:17: groups[0].depends_on: depends_on has a cycle: a → c → b → a');
  });

  it('refuses unknown names and self-dependencies', () => {
    expect(refusal(pd(['depends_on: [prefil]']))).toBe(
      'task.yml:5:18: groups[0].depends_on[0]: no group named "prefil" (groups: router, prefill, decode)',
    );
    expect(refusal(pd(['depends_on: [router]']))).toBe('task.yml:5:18: groups[0].depends_on[0]: group "router" cannot depend on itself');
  });

  it('refuses depends_on together with startup_order', () => {
    expect(refusal(pd(['depends_on: [prefill]'], [], ['startup_order: workers-first']))).toMatch(
      /^task\.yml:2:1: startup_order: `startup_order` and `depends_on` \(groups\[0\]\) cannot be combined/,
    );
  });

  it('refuses malformed probes with their field', () => {
    expect(refusal(pd([], ['ready: {}']))).toMatch(/^task\.yml:7:12: groups\[1\]\.ready: `ready` needs one of `http`, `tcp` or `command`$/);
    expect(refusal(pd([], ['ready: {tcp: 8000, command: x}']))).toMatch(/groups\[1\]\.ready: `ready` takes one of tcp, command, not several$/);
    expect(refusal(pd([], ['ready: {http: {port: 70000}}']))).toMatch(/groups\[1\]\.ready\.http\.port: expected a port number 1\.\.65535/);
    expect(refusal(pd([], ['ready: {http: {port: 80, path: health}}']))).toMatch(/groups\[1\]\.ready\.http\.path: expected a URL path/);
    expect(refusal(pd([], ['ready: {tcp: 80, timeout: 0}']))).toMatch(/groups\[1\]\.ready\.timeout: must be more than 0 seconds/);
    expect(refusal(pd([], ['ready: {tcp: 80, every: 1s}']))).toMatch(/groups\[1\]\.ready\.every: unknown field `every` in `ready`/);
  });
});
