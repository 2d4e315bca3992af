import { describe, expect, it } from 'vitest';
import { loadPlan, planToJson, PlanJsonSchema } from '../../src/plan';

function plan(text: string) {
  return loadPlan(text, 'task.yml', { environ: {}, runName: 'json-run' });
}

describe('planToJson', () => {
  const json = planToJson(
    plan(
      [
        'type: task',
        'groups:',
        '  - name: router',
        '    commands: [route]',
        '    ports: [8000]',
        '    resources: {cpu: 4}',
        '  - name: workers',
        '    nodes: 2',
        '    commands: [work]',
        '    resources:',
        '      gpu: H100,A100:80GB:2',
        '      memory: 512MB..',
        '      disk: null',
      ].join('\n'),
    ),
  );

  it('has exactly the shape of the issue, in its key order', () => {
    expect(Object.keys(json)).toEqual(['run_name', 'nodes_num', 'groups', 'jobs']);
    expect(Object.keys(json.groups[0] ?? {})).toEqual(['index', 'name', 'nodes', 'resources']);
    expect(Object.keys(json.groups[0]?.resources ?? {})).toEqual(['cpu', 'memory', 'disk', 'gpu']);
    expect(Object.keys(json.groups[0]?.resources.gpu ?? {})).toEqual(['vendor', 'name', 'count', 'memory']);
    expect(Object.keys(json.jobs[0] ?? {})).toEqual([
      'job_num',
      'job_name',
      'node_group_index',
      'node_group_name',
      'node_group_job_index',
      'global_master',
      'group_master',
      'commands',
      'ports',
    ]);
    expect(PlanJsonSchema.strict().safeParse(json).success).toBe(true);
  });

  it('gives resources after defaults, sizes in GB, null for unbounded or unset', () => {
    expect(json).toEqual({
      run_name: 'json-run',
      nodes_num: 3,
      groups: [
        {
          index: 0,
          name: 'router',
          nodes: 1,
          resources: {
            cpu: { arch: 'x86', count: { min: 4, max: 4 } },
            memory: { min: 8, max: null },
            disk: { min: 100, max: null },
            gpu: { vendor: 'nvidia', name: null, count: { min: 0, max: null }, memory: null },
          },
        },
        {
          index: 1,
          name: 'workers',
          nodes: 2,
          resources: {
            cpu: { arch: 'x86', count: { min: 2, max: null } },
            memory: { min: 0.5, max: null },
            disk: null,
            gpu: { vendor: 'nvidia', name: ['H100', 'A100'], count: { min: 2, max: 2 }, memory: { min: 80, max: 80 } },
          },
        },
      ],
      jobs: [
        {
          job_num: 0,
          job_name: 'json-run-0-0',
          node_group_index: 0,
          node_group_name: 'router',
          node_group_job_index: 0,
          global_master: true,
          group_master: true,
          commands: ['route'],
          ports: [{ container_port: 8000, local_port: 8000 }],
        },
        {
          job_num: 1,
          job_name: 'json-run-1-0',
          node_group_index: 1,
          node_group_name: 'workers',
          node_group_job_index: 0,
          global_master: false,
          group_master: true,
          commands: ['work'],
          ports: [],
        },
        {
          job_num: 2,
          job_name: 'json-run-2-0',
          node_group_index: 1,
          node_group_name: 'workers',
          node_group_job_index: 1,
          global_master: false,
          group_master: false,
          commands: ['work'],
          ports: [],
        },
      ],
    });
  });

  it('round-trips through JSON text unchanged', () => {
    expect(JSON.parse(JSON.stringify(json))).toEqual(json);
  });

  it('does not share arrays with the plan', () => {
    const source = plan('type: task\ncommands: [a]\n');
    const out = planToJson(source);
    out.jobs[0]?.commands.push('b');
    expect(source.jobs[0]?.commands).toEqual(['a']);
  });
});
