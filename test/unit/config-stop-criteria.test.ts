import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors';
import { loadPlan } from '../../src/plan';
import { renderPlan } from '../../src/cli/render/plan-table';
import { plain } from '../../src/cli/render/style';
import { thrownBy } from '../helpers/refusal';

/** `stop_criteria`: dstack's all-done and master-done, and Troupe's `{group-done: GROUP}`. */

const load = (text: string) => loadPlan(text, 'task.yml', { environ: {}, runName: 'test-run' });

function refusal(text: string): string {
  const err = thrownBy(() => load(text), ConfigError);
  expect(err.message).not.toContain('\n');
  return err.message;
}

const ray = (criteria: string) =>
  [
    'type: task',
    `stop_criteria: ${criteria}`,
    'groups:',
    '  - name: head',
    '    commands: [ray start --head --block]',
    '  - name: workers',
    '    nodes: 2',
    '    commands: [ray start --block]',
    '  - name: driver',
    '    commands: [python driver.py]',
    '',
  ].join('\n');

describe('stop_criteria', () => {
  it("keeps dstack's values: all-done (the default) and master-done (job 0: node 0 of the first group)", () => {
    expect(load(ray('master-done')).stop_criteria).toBe('master-done');
    expect(load(ray('all-done')).stop_criteria).toBe('all-done');
    expect(load(ray('null')).stop_criteria).toBe('all-done');
    expect(load(ray('all-done')).stop_group).toBeUndefined();
  });

  it('group-done names a group in any place of the list: the plan keeps its index', () => {
    const plan = load(ray('{group-done: driver}'));
    expect(plan.stop_criteria).toBe('group-done');
    expect(plan.stop_group).toBe(2);
    expect(load(ray('{group-done: workers}')).stop_group).toBe(1);
    expect(renderPlan(plan, plain).join('\n')).toContain('group-done: driver');
  });

  it('refuses an unknown group, at the name', () => {
    expect(refusal(ray('{group-done: drivr}'))).toBe('task.yml:2:29: stop_criteria.group-done: no group named "drivr" (groups: head, workers, driver)');
  });

  it('refuses other shapes with what it takes', () => {
    expect(refusal(ray('{group_done: driver}'))).toBe(
      'task.yml:2:17: stop_criteria.group_done: unknown field `group_done` in `stop_criteria`: expected one of all-done, master-done or a mapping {group-done: GROUP}',
    );
    expect(refusal(ray('{group-done: [driver]}'))).toBe(
      'task.yml:2:29: stop_criteria.group-done: `group-done` names the group whose nodes end the run, got a list',
    );
    expect(refusal(ray('group-done'))).toBe(
      'task.yml:2:16: stop_criteria: expected one of all-done, master-done or a mapping {group-done: GROUP}, got a string ("group-done")',
    );
    expect(refusal(['type: task', 'nodes: 2', 'commands: [x]', 'stop_criteria: {group-done: "0"}', ''].join('\n'))).toBe(
      'task.yml:4:29: stop_criteria.group-done: `group-done` needs `groups`: with `nodes` the run has one group; use all-done or master-done',
    );
  });
});
