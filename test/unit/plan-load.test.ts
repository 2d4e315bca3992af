import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors';
import { loadPlan, MAX_TOTAL_NODES, PlanSchema, type LoadPlanOptions } from '../../src/plan';
import { generateRunName, RUN_NAME } from '../../src/plan/run-name';
import { thrownBy } from '../helpers/refusal';

function yaml(...lines: string[]): string {
  return `${lines.join('\n')}\n`;
}

function load(text: string, opts: Partial<LoadPlanOptions> = {}) {
  return loadPlan(text, 'task.yml', { environ: {}, runName: 'test-run', ...opts });
}

function refusal(text: string): string {
  return thrownBy(() => load(text), ConfigError).message;
}

const seedSample = readFileSync(fileURLToPath(new URL('../../examples/pd-disagg.yml', import.meta.url)), 'utf8');

describe('the seed sample (examples/pd-disagg.yml)', () => {
  const plan = loadPlan(seedSample, 'examples/pd-disagg.yml', { environ: { HF_TOKEN: 'hf-test' } });

  it('plans three jobs: router 0, prefill 1, decode 2', () => {
    expect(plan.run_name).toBe('pd-disagg');
    expect(plan.nodes_num).toBe(3);
    expect(plan.jobs.map((j) => [j.job_num, j.job_name, j.node_group_name, j.global_master, j.group_master])).toEqual([
      [0, 'pd-disagg-0-0', 'router', true, true],
      [1, 'pd-disagg-1-0', 'prefill', false, true],
      [2, 'pd-disagg-2-0', 'decode', false, true],
    ]);
  });

  it('keeps the run settings and env', () => {
    expect(plan.startup_order).toBe('workers-first');
    expect(plan.stop_criteria).toBe('all-done');
    expect(plan.image).toBe('lmsysorg/sglang:latest');
    expect(plan.env).toEqual({ HF_TOKEN: 'hf-test', MODEL_ID: 'meta-llama/Llama-3.2-3B-Instruct' });
    expect(plan.retry).toBeNull();
    expect(plan.max_duration_s).toBeNull();
  });

  it('gives each group its resources with defaults applied', () => {
    const [router, prefill, decode] = plan.groups;
    expect(router?.resources.cpu).toEqual({ arch: null, count: { min: 4, max: 4 } });
    expect(router?.resources.gpu).toMatchObject({ vendor: null, count: { min: 0, max: null } });
    expect(router?.ports).toEqual([{ container_port: 8000, local_port: 8000 }]);
    for (const gpuGroup of [prefill, decode]) {
      expect(gpuGroup?.resources.gpu).toMatchObject({ vendor: 'nvidia', name: ['L40S'], count: { min: 1, max: null } });
      expect(gpuGroup?.resources.memory).toEqual({ min: 8, max: null });
      expect(gpuGroup?.resources.disk).toEqual({ min: 100, max: null });
    }
  });

  it('keeps the commands as written, references not yet replaced', () => {
    const routerCommands = plan.jobs[0]?.commands ?? [];
    expect(routerCommands[0]).toBe('pip install smg');
    expect(routerCommands[1]).toContain('--prefill http://${{ groups[1].nodes[0].IP_ADDRESS }}:8000 8998');
    expect(routerCommands[1]).toContain('--decode  http://${{ groups[2].nodes[0].IP_ADDRESS }}:8000');
    expect(plan.jobs[1]?.commands[0]).toContain('--disaggregation-mode prefill');
  });

  it('is a valid Plan', () => {
    expect(PlanSchema.parse(plan)).toEqual(plan);
  });
});

describe('one global rank space', () => {
  const plan = load(
    yaml(
      'type: task',
      'image: img',
      'groups:',
      '  - name: head',
      '    nodes: 3',
      '  - name: gpu-a',
      '    nodes: 2',
      '    commands: [a]',
      '  - nodes: 2',
      '    commands: [b]',
    ),
  );

  it('numbers group 0 first, then group 1, then group 2', () => {
    expect(plan.jobs.map((j) => [j.job_num, j.node_group_index, j.node_group_name, j.node_group_job_index])).toEqual([
      [0, 0, 'head', 0],
      [1, 0, 'head', 1],
      [2, 0, 'head', 2],
      [3, 1, 'gpu-a', 0],
      [4, 1, 'gpu-a', 1],
      [5, 2, '2', 0],
      [6, 2, '2', 1],
    ]);
    expect(plan.nodes_num).toBe(7);
  });

  it('makes job 0 the global master and node 0 of each group its master', () => {
    expect(plan.jobs.filter((j) => j.global_master).map((j) => j.job_num)).toEqual([0]);
    expect(plan.jobs.filter((j) => j.group_master).map((j) => j.job_num)).toEqual([0, 3, 5]);
  });

  it('names jobs <run>-<job_num>-0 and gives them their group commands', () => {
    expect(plan.jobs.map((j) => j.job_name)).toEqual([0, 1, 2, 3, 4, 5, 6].map((n) => `test-run-${n}-0`));
    expect(plan.jobs.map((j) => j.commands)).toEqual([[], [], [], ['a'], ['a'], ['b'], ['b']]);
    expect(plan.groups.map((g) => [g.index, g.name, g.nodes])).toEqual([
      [0, 'head', 3],
      [1, 'gpu-a', 2],
      [2, '2', 2],
    ]);
  });
});

describe('a task without groups', () => {
  it('is one group named "0" with nodes, commands, ports and resources', () => {
    const plan = load(yaml('type: task', 'nodes: 4', 'commands: [train]', 'ports: [6006]', 'resources: {gpu: "A100:8"}'));
    expect(plan.groups).toEqual([
      expect.objectContaining({ index: 0, name: '0', nodes: 4, commands: ['train'], ports: [{ container_port: 6006, local_port: 6006 }] }),
    ]);
    expect(plan.groups[0]?.resources.gpu).toMatchObject({ vendor: 'nvidia', name: ['A100'], count: { min: 8, max: 8 } });
    expect(plan.jobs.map((j) => [j.job_num, j.node_group_name, j.node_group_job_index, j.global_master, j.group_master])).toEqual([
      [0, '0', 0, true, true],
      [1, '0', 1, false, false],
      [2, '0', 2, false, false],
      [3, '0', 3, false, false],
    ]);
  });

  it('has one node by default and dstack defaults', () => {
    const plan = load(yaml('type: task', 'commands: [a]'));
    expect(plan.nodes_num).toBe(1);
    expect(plan.startup_order).toBe('any');
    expect(plan.stop_criteria).toBe('all-done');
    expect(plan.groups[0]?.resources).toEqual({
      cpu: { arch: 'x86', count: { min: 2, max: null } },
      memory: { min: 8, max: null },
      shm_size: null,
      disk: { min: 100, max: null },
      gpu: { vendor: 'nvidia', name: null, count: { min: 0, max: null }, memory: null, total_memory: null, compute_capability: null },
    });
  });
});

describe('address references', () => {
  it('accepts references in range, with or without spaces, and escaped ones', () => {
    const plan = load(
      yaml(
        'type: task',
        'groups:',
        '  - nodes: 2',
        '    commands: ["echo ${{groups[1].nodes[2].IP_ADDRESS}} ${{ groups[0].nodes[1].IP_ADDRESS }}"]',
        '  - nodes: 3',
        '    commands: ["echo $${{ groups[9].nodes[9].IP_ADDRESS }}"]',
      ),
    );
    expect(plan.jobs[0]?.commands[0]).toBe('echo ${{groups[1].nodes[2].IP_ADDRESS}} ${{ groups[0].nodes[1].IP_ADDRESS }}');
    expect(plan.jobs[2]?.commands[0]).toBe('echo $${{ groups[9].nodes[9].IP_ADDRESS }}');
  });

  it('refuses a group index out of range at the reference', () => {
    expect(refusal(yaml('type: task', 'groups:', '  - commands:', '      - echo ${{ groups[2].nodes[0].IP_ADDRESS }}'))).toBe(
      'task.yml:4:14: groups[0].commands[0]: reference groups[2].nodes[0].IP_ADDRESS is out of range: the task has 1 group(s), 0..0',
    );
  });

  it('refuses a node index out of range at the reference', () => {
    const text = yaml(
      'type: task',
      'groups:',
      '  - name: router',
      '    commands: [a]',
      '  - name: workers',
      '    nodes: 2',
      '    commands:',
      '      - |',
      '        echo start',
      '        connect ${{ groups[1].nodes[2].IP_ADDRESS }}',
    );
    expect(refusal(text)).toBe(
      'task.yml:10:17: groups[1].commands[0]: reference groups[1].nodes[2].IP_ADDRESS is out of range: group 1 ("workers") has 2 node(s), 0..1',
    );
  });

  it('checks references in a task without groups against its nodes', () => {
    expect(load(yaml('type: task', 'nodes: 2', 'commands: ["ping ${{ groups[0].nodes[1].IP_ADDRESS }}"]')).nodes_num).toBe(2);
    expect(refusal(yaml('type: task', 'nodes: 2', 'commands: ["ping ${{ groups[0].nodes[2].IP_ADDRESS }}"]'))).toBe(
      'task.yml:3:18: commands[0]: reference groups[0].nodes[2].IP_ADDRESS is out of range: group 0 ("0") has 2 node(s), 0..1',
    );
  });

  it('refuses an illegal reference name and an unclosed reference', () => {
    expect(refusal(yaml('type: task', 'commands:', '  - echo ${{ groups[0].nodes[0].IP }}'))).toBe(
      'task.yml:3:10: commands[0]: Illegal reference name "groups[0].nodes[0].IP": only ${{ groups[i].nodes[j].IP_ADDRESS }} can be used in commands',
    );
    expect(refusal(yaml('type: task', 'commands:', '  - echo ${{ run.args }}'))).toMatch(/^task\.yml:3:10: commands\[0\]: Illegal reference name "run\.args"/);
    expect(refusal(yaml('type: task', 'commands:', '  - echo ${{ groups[0]'))).toBe('task.yml:3:10: commands[0]: unclosed "${{": expected "}}"');
    expect(refusal(yaml('type: task', 'commands:', '  - echo ${{ secrets.token }}'))).toBe(
      'task.yml:3:10: commands[0]: Illegal reference name "secrets.token": only ${{ groups[i].nodes[j].IP_ADDRESS }} can be used in commands (Troupe has no secrets store)',
    );
  });
});

describe('run name', () => {
  it('uses opts.runName over the config name', () => {
    expect(load(yaml('type: task', 'name: from-file', 'commands: [a]'), { runName: 'from-cli' }).run_name).toBe('from-cli');
    expect(load(yaml('type: task', 'name: from-file', 'commands: [a]'), { runName: undefined }).run_name).toBe('from-file');
  });

  it('generates a readable valid name when there is none', () => {
    const names = new Set<string>();
    for (let i = 0; i < 20; i++) {
      const name = load(yaml('type: task', 'commands: [a]'), { runName: undefined }).run_name;
      expect(name).toMatch(/^[a-z]+-[a-z]+-\d{4}$/);
      expect(name).toMatch(RUN_NAME);
      names.add(name);
    }
    expect(names.size).toBeGreaterThan(1);
  });

  it('is deterministic for a given source of randomness', () => {
    const seq = (values: number[]) => () => values.shift() ?? 0;
    expect(generateRunName(seq([0, 0, 0]))).toBe(generateRunName(seq([0, 0, 0])));
    expect(generateRunName(seq([0.5, 0, 0.999]))).toMatch(/^[a-z]+-[a-z]+-\d{4}$/);
    expect(generateRunName(() => 0.99999)).toMatch(RUN_NAME);
  });
});

describe('limits', () => {
  it('documents the node limit', () => {
    expect(MAX_TOTAL_NODES).toBe(4096);
  });
});
