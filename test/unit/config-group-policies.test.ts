import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors';
import { loadPlan } from '../../src/plan';
import { thrownBy } from '../helpers/refusal';

/**
 * Troupe's extensions for groups that heal and scale: `nodes: MIN..MAX`, `on_failure`,
 * `on_dependency_restart`, `on_peers_change` and `ready.min`: what each plans to, and every refusal.
 */

function yaml(...lines: string[]): string {
  return `${lines.join('\n')}\n`;
}

const load = (text: string) => loadPlan(text, 'task.yml', { environ: {}, runName: 'heal-run' });

function refusal(text: string): string {
  const err = thrownBy(() => load(text), ConfigError);
  expect(err.message).not.toContain('\n');
  expect(err.message.startsWith(`${err.file}:${err.line}:${err.col}: ${err.path}: `)).toBe(true);
  return err.message;
}

/** router → prefill, decode; `decode` lines go to the third group (line 9 onwards). */
const pd = (decode: string[], router: string[] = []) =>
  yaml(
    'type: task',
    'groups:',
    '  - name: router',
    '    commands: [route]',
    ...router.map((l) => `    ${l}`),
    '  - name: prefill',
    '    commands: [serve]',
    '  - name: decode',
    '    commands: [serve]',
    ...decode.map((l) => `    ${l}`),
  );

const decodeOf = (text: string) => load(text).groups[2];

describe('nodes: MIN..MAX on a group', () => {
  it('starts at MIN and keeps the bounds; a count has no range', () => {
    const plan = load(pd(['nodes: 1..3']));
    expect(plan.groups[2]).toMatchObject({ nodes: 1, nodes_range: { min: 1, max: 3 } });
    expect(plan.jobs.filter((j) => j.node_group_name === 'decode')).toHaveLength(1);
    expect(plan.nodes_num).toBe(3);
    expect(decodeOf(pd(['nodes: {min: 2, max: 4}']))).toMatchObject({ nodes: 2, nodes_range: { min: 2, max: 4 } });
    expect(decodeOf(pd(['nodes: "2 .. 2"']))).toMatchObject({ nodes: 2, nodes_range: { min: 2, max: 2 } });
    expect(decodeOf(pd(['nodes: 2']))).toMatchObject({ nodes: 2, nodes_range: null });
    expect(decodeOf(pd(['nodes: "2"']))).toMatchObject({ nodes: 2, nodes_range: null });
  });

  it('refuses a range without both bounds, below 1, upside down or past the run limit', () => {
    expect(refusal(pd(['nodes: 2..']))).toBe("task.yml:9:12: groups[2].nodes: a group's nodes range needs a maximum: write MIN..MAX, e.g. 1..3");
    expect(refusal(pd(['nodes: {min: 2}']))).toBe("task.yml:9:12: groups[2].nodes: a group's nodes range needs a maximum: write MIN..MAX, e.g. 1..3");
    expect(refusal(pd(['nodes: ..3']))).toBe("task.yml:9:12: groups[2].nodes: a group's nodes range needs a minimum: write MIN..MAX, e.g. 1..3");
    expect(refusal(pd(['nodes: 0..3']))).toBe("task.yml:9:12: groups[2].nodes: a group starts with at least 1 node: the range's minimum is 0");
    expect(refusal(pd(['nodes: 3..1']))).toBe('task.yml:9:12: groups[2].nodes: range 3..1 has its minimum above its maximum');
    expect(refusal(pd(['nodes: 1..5000']))).toBe("task.yml:9:12: groups[2].nodes: a group's nodes range reaches 5000; a run has at most 4096 nodes");
    expect(refusal(pd(['nodes: {min: 1, most: 3}']))).toBe('task.yml:9:21: groups[2].nodes.most: unknown field `most` in a range: only `min` and `max`');
    expect(refusal(pd(['nodes: x']))).toBe('task.yml:9:12: groups[2].nodes: expected an integer >= 1, got a string ("x")');
  });

  it('counts the ranges\' maximums against the run limit', () => {
    expect(refusal(pd(['nodes: 1..4000'], ['nodes: 1..100']))).toBe(
      "task.yml:3:3: groups: the groups' nodes ranges reach 4101 nodes in all; a run has at most 4096: lower a range's maximum",
    );
  });

  it('stays a plain count at the top level of a task without groups, as in dstack', () => {
    expect(refusal(yaml('type: task', 'commands: [x]', 'nodes: 1..3'))).toBe('task.yml:3:8: nodes: expected an integer >= 1, got a string ("1..3")');
  });

  it('lets commands interpolate only the addresses of the nodes present at start', () => {
    const ref = (j: number) => [`commands: ["echo \${{ groups[2].nodes[${j}].IP_ADDRESS }}"]`];
    const text = (j: number) =>
      yaml('type: task', 'groups:', '  - name: router', ...ref(j).map((l) => `    ${l}`), '  - name: prefill', '    commands: [serve]', '  - name: decode', '    nodes: 2..4', '    commands: [serve]');
    expect(load(text(1)).groups[0]?.commands).toEqual(['echo ${{ groups[2].nodes[1].IP_ADDRESS }}']);
    expect(refusal(text(2))).toBe(
      'task.yml:4:22: groups[0].commands[0]: reference groups[2].nodes[2].IP_ADDRESS is out of range: group 2 ("decode") starts with 2 node(s) (nodes: 2..4), and only those have an address in commands: use 0..1, or read the live addresses from $TROUPE_PEERS_FILE',
    );
  });
});

describe('on_failure', () => {
  it('takes an action alone, with the default budget of 3 restarts over the whole run', () => {
    expect(decodeOf(pd(['on_failure: restart-node']))?.on_failure).toEqual({ action: 'restart-node', max_restarts: 3, within_s: null });
    expect(decodeOf(pd(['on_failure: restart-group']))?.on_failure).toEqual({ action: 'restart-group', max_restarts: 3, within_s: null });
    expect(decodeOf(pd(['on_failure: fail-run']))?.on_failure).toEqual({ action: 'fail-run', max_restarts: 0, within_s: null });
    expect(decodeOf(pd([]))?.on_failure).toBeNull();
  });

  it('takes a mapping with a budget and a window as a dstack duration', () => {
    expect(decodeOf(pd(['on_failure: {action: restart-group, max_restarts: 5, within: 10m}']))?.on_failure).toEqual({
      action: 'restart-group',
      max_restarts: 5,
      within_s: 600,
    });
    expect(decodeOf(pd(['on_failure: {action: restart-node, max_restarts: 0, within: 90}']))?.on_failure).toEqual({
      action: 'restart-node',
      max_restarts: 0,
      within_s: 90,
    });
    expect(decodeOf(pd(['on_failure: {action: fail-run}']))?.on_failure).toEqual({ action: 'fail-run', max_restarts: 0, within_s: null });
  });

  it('refuses an unknown action, a missing one, a bad budget or window, and a budget on fail-run', () => {
    expect(refusal(pd(['on_failure: reboot']))).toBe(
      'task.yml:9:17: groups[2].on_failure: expected one of fail-run, restart-node, restart-group, got a string ("reboot")',
    );
    expect(refusal(pd(['on_failure: [a]']))).toBe(
      'task.yml:9:17: groups[2].on_failure: expected one of fail-run, restart-node, restart-group or a mapping with `action`, `max_restarts` and `within`, got a list',
    );
    expect(refusal(pd(['on_failure: {max_restarts: 2}']))).toBe(
      'task.yml:9:17: groups[2].on_failure: `on_failure` needs an `action`: one of fail-run, restart-node, restart-group',
    );
    expect(refusal(pd(['on_failure: {action: restart, max_restarts: 2}']))).toMatch(
      /^task\.yml:9:26: groups\[2\]\.on_failure\.action: expected one of fail-run, restart-node, restart-group, got a string \("restart"\)$/,
    );
    expect(refusal(pd(['on_failure: {action: restart-node, max_restarts: -1}']))).toBe(
      'task.yml:9:54: groups[2].on_failure.max_restarts: expected a whole number of restarts (0 or more), got a number (-1)',
    );
    expect(refusal(pd(['on_failure: {action: restart-node, within: 0}']))).toBe(
      'task.yml:9:48: groups[2].on_failure.within: expected a duration of more than 0 seconds, got a number (0)',
    );
    expect(refusal(pd(['on_failure: {action: restart-node, within: soon}']))).toMatch(/groups\[2\]\.on_failure\.within: expected a duration such as 90/);
    expect(refusal(pd(['on_failure: {action: restart-node, tries: 1}']))).toBe(
      'task.yml:9:40: groups[2].on_failure.tries: unknown field `tries` in `on_failure`: expected `action`, `max_restarts` and `within`',
    );
    expect(refusal(pd(['on_failure: {action: fail-run, max_restarts: 2}']))).toBe(
      'task.yml:9:36: groups[2].on_failure.max_restarts: `max_restarts` has no meaning with `action: fail-run`: remove it, or restart nodes with restart-node or restart-group',
    );
    expect(refusal(pd(['on_failure: {action: fail-run, within: 1h}']))).toMatch(/groups\[2\]\.on_failure\.within: `within` has no meaning with `action: fail-run`/);
  });
});

describe('on_dependency_restart and on_peers_change', () => {
  it('default to keep and no hook; take restart and a command beside depends_on', () => {
    expect(decodeOf(pd([]))).toMatchObject({ on_dependency_restart: 'keep', on_peers_change: null });
    expect(
      decodeOf(pd(['depends_on: [prefill]', 'on_dependency_restart: restart', 'on_peers_change: "echo $TROUPE_PEERS_VERSION >> /tmp/v"'])),
    ).toMatchObject({ on_dependency_restart: 'restart', on_peers_change: 'echo $TROUPE_PEERS_VERSION >> /tmp/v' });
  });

  it('refuse a bad value, an empty command, and either without depends_on', () => {
    expect(refusal(pd(['depends_on: [prefill]', 'on_dependency_restart: maybe']))).toBe(
      'task.yml:10:28: groups[2].on_dependency_restart: expected keep or restart, got a string ("maybe")',
    );
    expect(refusal(pd(['on_dependency_restart: restart']))).toBe(
      'task.yml:9:5: groups[2].on_dependency_restart: group "decode" has no `depends_on`: on_dependency_restart says what it does when a group it depends on restarts; add depends_on or remove it',
    );
    expect(refusal(pd(['depends_on: [prefill]', 'on_peers_change: ""']))).toBe(
      'task.yml:10:22: groups[2].on_peers_change: expected a command to run, got an empty string',
    );
    expect(refusal(pd(['depends_on: [prefill]', 'on_peers_change: [a]']))).toMatch(/^task\.yml:10:22: groups\[2\]\.on_peers_change: expected a string, got a list/);
    expect(refusal(pd(['on_peers_change: echo hi']))).toBe(
      'task.yml:9:5: groups[2].on_peers_change: group "decode" has no `depends_on`: on_peers_change runs when the groups it depends on change; add depends_on or remove it',
    );
  });
});

describe('ready.min (a quorum)', () => {
  it('stands alone (no probe: ready once running) or beside a probe', () => {
    expect(decodeOf(pd(['nodes: 3', 'ready: {min: 2}']))).toMatchObject({ ready: null, ready_min: { kind: 'count', value: 2 } });
    expect(decodeOf(pd(['nodes: 3', 'ready: {min: "2"}']))?.ready_min).toEqual({ kind: 'count', value: 2 });
    expect(decodeOf(pd(['ready: {min: "50%"}']))).toMatchObject({ ready: null, ready_min: { kind: 'percent', value: 50 } });
    expect(decodeOf(pd(['nodes: 2', 'ready: {http: 8000, min: 1}']))).toMatchObject({
      ready: { check: { kind: 'http', port: 8000, path: '/' }, interval_s: 2, timeout_s: 600 },
      ready_min: { kind: 'count', value: 1 },
    });
    expect(decodeOf(pd(['ready: {tcp: 80}']))?.ready_min).toBeNull();
  });

  it('refuses a count above the nodes the group starts with, naming both', () => {
    expect(refusal(pd(['ready: {min: 2}']))).toBe(
      'task.yml:9:18: groups[2].ready.min: ready.min is 2 but group "decode" has 1 node: its dependents would wait for nodes it does not start with; lower it or use a percentage',
    );
    expect(refusal(pd(['nodes: 2..4', 'ready: {tcp: 80, min: 3}']))).toBe(
      'task.yml:10:27: groups[2].ready.min: ready.min is 3 but group "decode" starts with 2 nodes (nodes: 2..4): its dependents would wait for nodes it does not start with; lower it or use a percentage',
    );
  });

  it('refuses a bad count or percentage, and probe timings without a probe', () => {
    expect(refusal(pd(['ready: {min: 0}']))).toBe(
      'task.yml:9:18: groups[2].ready.min: expected a number of nodes (1 or more) or a percentage such as "50%", got a number (0)',
    );
    expect(refusal(pd(['ready: {min: x}']))).toMatch(/groups\[2\]\.ready\.min: expected a number of nodes \(1 or more\) or a percentage/);
    expect(refusal(pd(['ready: {min: "0%"}']))).toBe(
      'task.yml:9:18: groups[2].ready.min: a percentage of the group\'s nodes must be 1%..100%, got a string ("0%")',
    );
    expect(refusal(pd(['ready: {min: "150%"}']))).toMatch(/groups\[2\]\.ready\.min: a percentage of the group's nodes must be 1%\.\.100%/);
    expect(refusal(pd(['ready: {min: "12.5%"}']))).toMatch(/groups\[2\]\.ready\.min: expected a number of nodes/);
    expect(refusal(pd(['ready: {min: 1, timeout: 5m}']))).toBe(
      'task.yml:9:21: groups[2].ready.timeout: `timeout` times a probe, and `ready` has none: add one of `http`, `tcp` or `command`, or remove it',
    );
    expect(refusal(pd(['ready: {}']))).toBe('task.yml:9:12: groups[2].ready: `ready` needs one of `http`, `tcp` or `command`');
  });
});

describe('examples/pd-heal-local.yml', () => {
  it('plans: decode 1..3 restarting its nodes, prefill with a quorum of 1, the router with a peers hook', () => {
    const file = fileURLToPath(new URL('../../examples/pd-heal-local.yml', import.meta.url));
    const plan = loadPlan(readFileSync(file, 'utf8'), 'examples/pd-heal-local.yml', { environ: {} });
    const [router, prefill, decode] = plan.groups;
    expect(plan.stop_criteria).toBe('master-done');
    expect(plan.jobs.map((j) => `${j.node_group_name}/${j.node_group_job_index}`)).toEqual(['router/0', 'prefill/0', 'prefill/1', 'decode/0']);
    expect(router).toMatchObject({ depends_on: [1, 2], on_peers_change: expect.stringContaining('TROUPE_PEERS_VERSION') });
    expect(prefill).toMatchObject({ nodes: 2, ready_min: { kind: 'count', value: 1 }, ready: { check: { kind: 'http', port: 8000, path: '/health' } } });
    expect(decode).toMatchObject({
      nodes: 1,
      nodes_range: { min: 1, max: 3 },
      on_failure: { action: 'restart-node', max_restarts: 3, within_s: 600 },
    });
  });
});
