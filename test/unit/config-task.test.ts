import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors';
import { loadPlan, type LoadPlanOptions } from '../../src/plan';
import { thrownBy } from '../helpers/refusal';

/**
 * The task config's rules, each with the exact one-line refusal: file:line:col of the offending
 * node, the field path, and what is wrong.
 */

function yaml(...lines: string[]): string {
  return `${lines.join('\n')}\n`;
}

function load(text: string, opts: Partial<LoadPlanOptions> = {}) {
  return loadPlan(text, 'task.yml', { environ: {}, runName: 'test-run', ...opts });
}

function refusal(text: string, opts: Partial<LoadPlanOptions> = {}): string {
  const err = thrownBy(() => load(text, opts), ConfigError);
  expect(err.message).not.toContain('\n');
  expect(err.message.startsWith(`${err.file}:${err.line}:${err.col}: ${err.path}: `)).toBe(true);
  return err.message;
}

describe('type', () => {
  it('needs `type: task`', () => {
    expect(refusal(yaml('commands: [a]'))).toBe('task.yml:1:1: type: missing `type`: add `type: task`');
    expect(refusal(yaml('type: fleet', 'ssh_config: {hosts: [a]}'))).toBe(
      'task.yml:1:7: type: this is a fleet config; `troupe plan` and `troupe apply` take a task config (`type: task`)',
    );
    expect(refusal(yaml('type: service', 'port: 80'))).toBe(
      'task.yml:1:7: type: this is a service config: `troupe plan` checks services, but Troupe does not run them yet; expected `type: task`',
    );
    expect(refusal(yaml('type: job'))).toBe('task.yml:1:7: type: expected `type: task`, got a string ("job")');
  });
});

describe('fields', () => {
  it('refuses an unknown field, suggesting the likely one', () => {
    expect(refusal(yaml('type: task', 'comands: [a]'))).toBe(
      'task.yml:2:1: comands: unknown field `comands` in the task (did you mean `commands`?)',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'whatever: 1'))).toBe('task.yml:3:1: whatever: unknown field `whatever` in the task');
  });

  it.each([
    'volumes: [/data:/data]',
    'spot_policy: auto',
    'backends: [aws]',
    'regions: [eu-west-1]',
    'repos: [.]',
    'files: [a:b]',
    'privileged: true',
    'utilization_policy: {min_gpu_utilization: 10, time_window: 1h}',
    'schedule: {cron: "0 * * * *"}',
    'setup: [echo]',
    'python: "3.12"',
    'docker: true',
    'registry_auth: {username: u, password: p}',
    'shell: bash',
    'user: ubuntu',
    'idle_duration: 1h',
    'max_price: 2.5',
    'instances: [a]',
    'tags: {a: b}',
    'entrypoint: /bin/run',
  ])('refuses the dstack field Troupe does not implement: %s', (line) => {
    const field = line.slice(0, line.indexOf(':'));
    const message = refusal(yaml('type: task', 'commands: [a]', line));
    expect(message.startsWith(`task.yml:3:1: ${field}: Troupe does not support the dstack field \`${field}\``)).toBe(true);
    expect(message.endsWith(': remove it')).toBe(true);
  });

  it('refuses unknown fields in a group', () => {
    expect(refusal(yaml('type: task', 'groups:', '  - commands: [a]', '    image: x'))).toBe(
      'task.yml:4:5: groups[0].image: unknown field `image` in a group',
    );
  });

  it('reports the refusal earliest in the file first', () => {
    expect(refusal(yaml('type: task', 'nodes: x', 'commands: 5', 'foo: 1'))).toBe(
      'task.yml:2:8: nodes: expected an integer >= 1, got a string ("x")',
    );
  });

  it('checks types and says what it got', () => {
    expect(refusal(yaml('type: task', 'commands: echo hi'))).toBe('task.yml:2:11: commands: expected a list, got a string ("echo hi")');
    expect(refusal(yaml('type: task', 'commands: [[a]]'))).toBe('task.yml:2:12: commands[0]: expected a string, got a list');
    expect(refusal(yaml('type: task', 'commands: [a]', 'image: [x]'))).toBe('task.yml:3:8: image: expected an image reference, got a list');
    expect(refusal(yaml('type: task', 'commands: [a]', 'startup_order: first'))).toBe(
      'task.yml:3:16: startup_order: expected one of any, master-first, workers-first, got a string ("first")',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'stop_criteria: all'))).toBe(
      'task.yml:3:16: stop_criteria: expected one of all-done, master-done or a mapping {group-done: GROUP}, got a string ("all")',
    );
  });

  it('takes numbers where dstack takes them for strings and integers', () => {
    const plan = load(yaml('type: task', 'commands: [123, echo]', 'nodes: "2"', 'image: 3.1'));
    expect(plan.groups[0]?.commands).toEqual(['123', 'echo']);
    expect(plan.nodes_num).toBe(2);
    expect(plan.image).toBe('3.1');
  });

  it('treats null as unset where dstack does', () => {
    const plan = load(yaml('type: task', 'commands: [a]', 'name: null', 'image: ~', 'nodes:', 'retry: null', 'groups: null'));
    expect(plan.nodes_num).toBe(1);
    expect(plan.image).toBeNull();
    expect(plan.groups).toHaveLength(1);
  });

  it('needs commands or an image without groups', () => {
    expect(refusal(yaml('type: task'))).toBe('task.yml:1:1: commands: either `commands` or `image` must be set');
    expect(refusal(yaml('type: task', 'commands: []'))).toBe('task.yml:2:11: commands: either `commands` or `image` must be set');
    expect(load(yaml('type: task', 'image: ubuntu')).groups[0]?.commands).toEqual([]);
  });

  it('needs an absolute working_dir', () => {
    expect(refusal(yaml('type: task', 'commands: [a]', 'working_dir: app'))).toBe(
      'task.yml:3:14: working_dir: working_dir must be an absolute path, got "app"',
    );
    expect(load(yaml('type: task', 'commands: [a]', 'working_dir: /app')).working_dir).toBe('/app');
  });

  it('checks the run name as dstack does', () => {
    expect(refusal(yaml('type: task', 'name: My_Run', 'commands: [a]'), { runName: undefined })).toBe(
      'task.yml:2:7: name: run name "My_Run" must match ^[a-z][a-z0-9-]{1,40}$ (lowercase letters, digits and -, starting with a letter)',
    );
    expect(refusal(yaml('type: task', 'name: a', 'commands: [a]'), { runName: undefined })).toMatch(/^task\.yml:2:7: name: run name "a"/);
    expect(refusal(yaml('type: task', 'commands: [a]'), { runName: '9lives' })).toMatch(/^task\.yml:1:1: \(run name\): run name "9lives"/);
  });

  it('accepts fleets by name', () => {
    expect(load(yaml('type: task', 'commands: [a]', 'fleets: [gpu-lab, cpu-lab]')).fleets).toEqual(['gpu-lab', 'cpu-lab']);
    expect(load(yaml('type: task', 'commands: [a]')).fleets).toBeNull();
  });
});

describe('groups', () => {
  it('are mutually exclusive with nodes', () => {
    expect(refusal(yaml('type: task', 'nodes: 2', 'groups:', '  - commands: [a]'))).toBe(
      'task.yml:2:1: nodes: `nodes` and `groups` are mutually exclusive: give each group its `nodes` instead',
    );
  });

  it('cannot be empty', () => {
    expect(refusal(yaml('type: task', 'groups: []'))).toBe(
      'task.yml:2:9: groups: `groups` cannot be empty: list at least one group, or remove it',
    );
  });

  it('refuse top-level commands, ports and entrypoint', () => {
    expect(refusal(yaml('type: task', 'commands: [a]', 'groups:', '  - commands: [b]'))).toBe(
      'task.yml:2:1: commands: top-level `commands` is not allowed when `groups` is set: give each group its `commands`',
    );
    expect(refusal(yaml('type: task', 'ports: [80]', 'groups:', '  - commands: [b]'))).toBe(
      'task.yml:2:1: ports: top-level `ports` is not allowed when `groups` is set: give each group its `ports`',
    );
    expect(refusal(yaml('type: task', 'entrypoint: run', 'groups:', '  - commands: [b]'))).toBe(
      'task.yml:2:1: entrypoint: top-level `entrypoint` is not allowed when `groups` is set: give each group `commands`',
    );
    // An empty list is no commands, as in dstack.
    expect(load(yaml('type: task', 'commands: []', 'groups:', '  - commands: [b]')).groups).toHaveLength(1);
  });

  it('need valid, unique names; a group without one is named by its index', () => {
    expect(refusal(yaml('type: task', 'groups:', '  - name: Router', '    commands: [a]'))).toBe(
      'task.yml:3:11: groups[0].name: a group name must match ^[a-z0-9][a-z0-9-]{0,39}$ (lowercase letters, digits and -, at most 40 characters)',
    );
    expect(refusal(yaml('type: task', 'groups:', `  - name: ${'a'.repeat(41)}`, '    commands: [a]'))).toMatch(
      /^task\.yml:3:11: groups\[0\]\.name: a group name must match/,
    );
    expect(load(yaml('type: task', 'groups:', `  - name: ${'a'.repeat(40)}`, '    commands: [a]')).groups[0]?.name).toHaveLength(40);
    expect(refusal(yaml('type: task', 'groups:', '  - name: a', '    commands: [x]', '  - name: a', '    commands: [y]'))).toBe(
      'task.yml:5:11: groups[1].name: duplicate group name "a" (also groups[0]): names must be unique; a group without `name` is named by its index',
    );
    expect(refusal(yaml('type: task', 'groups:', '  - commands: [x]', '  - name: "0"', '    commands: [y]'))).toMatch(
      /^task\.yml:4:11: groups\[1\]\.name: duplicate group name "0" \(also groups\[0\]\)/,
    );
    expect(refusal(yaml('type: task', 'groups:', '  - name: "1"', '    commands: [x]', '  - commands: [y]'))).toMatch(
      /^task\.yml:5:5: groups\[1\]: duplicate group name "1"/,
    );
  });

  it('need at least one node', () => {
    expect(refusal(yaml('type: task', 'groups:', '  - commands: [x]', '    nodes: 0'))).toBe(
      'task.yml:4:12: groups[0].nodes: expected an integer >= 1, got a number (0)',
    );
    expect(refusal(yaml('type: task', 'nodes: 0', 'commands: [x]'))).toBe('task.yml:2:8: nodes: expected an integer >= 1, got a number (0)');
  });

  it('need commands or a task-level image', () => {
    expect(refusal(yaml('type: task', 'groups:', '  - name: a'))).toBe(
      'task.yml:3:5: groups[0]: group "a" has no `commands`: give it `commands`, or set `image` at the task level',
    );
    expect(load(yaml('type: task', 'image: x', 'groups:', '  - name: a')).groups[0]?.commands).toEqual([]);
    // dstack takes an empty image here; Troupe refuses it as no image reference at all.
    expect(refusal(yaml('type: task', 'image: ""', 'groups:', '  - name: a'))).toBe(
      'task.yml:2:8: image: "" is not an image reference: write [registry/]name[:tag][@digest], e.g. lmsysorg/sglang:latest',
    );
  });

  it('bound the total number of nodes', () => {
    expect(refusal(yaml('type: task', 'groups:', '  - commands: [x]', '    nodes: 4000', '  - commands: [y]', '    nodes: 100'))).toBe(
      'task.yml:3:3: groups: the task asks for 4100 nodes; a run has at most 4096',
    );
    expect(refusal(yaml('type: task', 'commands: [x]', 'nodes: 5000'))).toBe(
      'task.yml:3:8: nodes: the task asks for 5000 nodes; a run has at most 4096',
    );
    expect(load(yaml('type: task', 'commands: [x]', 'nodes: 4096')).jobs).toHaveLength(4096);
  });
});

describe('env', () => {
  it('takes a list of KEY=VALUE and bare KEY from the submitting shell, or a mapping', () => {
    const plan = load(yaml('type: task', 'commands: [a]', 'env:', '  - A=1', '  - B=x=y', '  - C=', '  - HF_TOKEN'), {
      environ: { HF_TOKEN: 'secret' },
    });
    expect(plan.env).toEqual({ A: '1', B: 'x=y', C: '', HF_TOKEN: 'secret' });
    expect(load(yaml('type: task', 'commands: [a]', 'env:', '  PORT: 8080', '  NAME: x')).env).toEqual({ PORT: '8080', NAME: 'x' });
  });

  it('refuses a bare KEY the shell does not have', () => {
    expect(refusal(yaml('type: task', 'commands: [a]', 'env:', '  - A=1', '  - HF_TOKEN'))).toBe(
      'task.yml:5:5: env[1]: environment variable HF_TOKEN is not set in this shell: export it, or write HF_TOKEN=<value>',
    );
  });

  it('reports a missing KEY instead of refusing when asked to', () => {
    const missing: string[] = [];
    const plan = load(yaml('type: task', 'commands: [a]', 'env: [HF_TOKEN, B=2]'), { onMissingEnv: (e) => missing.push(e.message) });
    expect(plan.env).toEqual({ B: '2' });
    expect(missing).toEqual(['task.yml:3:7: env[0]: environment variable HF_TOKEN is not set in this shell: export it, or write HF_TOKEN=<value>']);
  });

  it('refuses duplicates, bad names and values that are not strings', () => {
    expect(refusal(yaml('type: task', 'commands: [a]', 'env: [A=1, A]'))).toBe('task.yml:3:12: env[1]: duplicate environment variable A');
    expect(refusal(yaml('type: task', 'commands: [a]', 'env: ["1A=x"]'))).toBe(
      'task.yml:3:7: env[0]: expected KEY=VALUE or KEY (a variable name: letters, digits, _), got a string ("1A=x")',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'env:', '  A:'))).toBe(
      'task.yml:4:3: env.A: expected a string value, got nothing (null); to pass A from your shell, list it as `- A`',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'env:', '  9A: x'))).toBe(
      'task.yml:4:3: env.9A: "9A" is not a variable name (letters, digits, _; not starting with a digit)',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'env: A=1'))).toBe(
      'task.yml:3:6: env: expected a list of KEY=VALUE or a mapping, got a string ("A=1")',
    );
  });

  it('refuses ${{ }} references in env, group addresses or secrets', () => {
    const refused = 'is not supported in `env`: group addresses go in commands, and Troupe has no secrets to fill in';
    expect(refusal(yaml('type: task', 'commands: [a]', 'env:', '  - X=${{ groups[0].nodes[0].IP_ADDRESS }}'))).toBe(
      `task.yml:4:5: env[0]: \`\${{ ... }}\` ${refused}`,
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'env:', '  TOKEN: ${{ secrets.hf }}'))).toBe(
      `task.yml:4:10: env.TOKEN: \`\${{ ... }}\` ${refused}`,
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'env: [X]'), { environ: { X: 'a ${{ groups[0].nodes[0].IP_ADDRESS }}' } })).toMatch(
      /^task\.yml:3:7: env\[0\]: /,
    );
    expect(load(yaml('type: task', 'commands: [a]', 'env: ["X=$${{ literal }}"]')).env).toEqual({ X: '$${{ literal }}' });
  });
});

describe('retry', () => {
  it('true retries on every event for an hour, as dstack', () => {
    const all = ['no-capacity', 'interruption', 'error'];
    expect(load(yaml('type: task', 'commands: [a]', 'retry: true')).retry).toEqual({ on_events: all, duration_s: 3600 });
    expect(load(yaml('type: task', 'commands: [a]', 'retry: on')).retry).toEqual({ on_events: all, duration_s: 3600 });
    expect(load(yaml('type: task', 'commands: [a]', 'retry: {}')).retry).toEqual({ on_events: all, duration_s: 3600 });
    expect(load(yaml('type: task', 'commands: [a]', 'retry: false')).retry).toBeNull();
    expect(load(yaml('type: task', 'commands: [a]')).retry).toBeNull();
  });

  it('takes events and a duration', () => {
    const plan = load(yaml('type: task', 'commands: [a]', 'retry:', '  on_events: [no-capacity, error]', '  duration: 2h'));
    expect(plan.retry).toEqual({ on_events: ['no-capacity', 'error'], duration_s: 7200 });
    expect(load(yaml('type: task', 'commands: [a]', 'retry: {duration: 90}')).retry?.duration_s).toBe(90);
  });

  it('refuses bad events, empty lists, negative durations and unknown fields', () => {
    expect(refusal(yaml('type: task', 'commands: [a]', 'retry:', '  on_events: [no-capacity, oom]'))).toBe(
      'task.yml:4:28: retry.on_events[1]: expected one of no-capacity, interruption, error, got a string ("oom")',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'retry: {on_events: []}'))).toBe(
      'task.yml:3:20: retry.on_events: `on_events` cannot be empty: list events (no-capacity, interruption, error) or leave it out to retry on all',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'retry: {duration: -5}'))).toBe('task.yml:3:19: retry.duration: cannot be negative, got -5');
    expect(refusal(yaml('type: task', 'commands: [a]', 'retry: {duration: soon}'))).toBe(
      'task.yml:3:19: retry.duration: expected a duration such as 90 (seconds), 30s, 5m, 1h, 2d or 1w, got a string ("soon")',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'retry:', '  limit: 3'))).toBe(
      'task.yml:4:3: retry.limit: unknown field `limit` in `retry`: expected `on_events` and `duration`',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'retry: [error]'))).toMatch(/^task\.yml:3:8: retry: expected true, false or a mapping/);
  });
});

describe('durations', () => {
  it.each([
    ['90', 90],
    ['"90"', 90],
    ['30s', 30],
    ['5m', 300],
    ['1h', 3600],
    ['2d', 172_800],
    ['1w', 604_800],
    ['"10 m"', 600],
    ['90.7', 90],
    ['off', null],
    ['false', null],
    ['true', null],
    ['0', null],
  ])('max_duration: %s → %j seconds', (value, seconds) => {
    expect(load(yaml('type: task', 'commands: [a]', `max_duration: ${value}`)).max_duration_s).toBe(seconds);
  });

  it('refuses what is not a duration', () => {
    expect(refusal(yaml('type: task', 'commands: [a]', 'max_duration: 1.5h'))).toBe(
      'task.yml:3:15: max_duration: expected a duration such as 90 (seconds), 30s, 5m, 1h, 2d or 1w, got a string ("1.5h")',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'max_duration: -5'))).toBe(
      'task.yml:3:15: max_duration: a duration cannot be negative, got a number (-5)',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'max_duration: 3y'))).toMatch(/^task\.yml:3:15: max_duration: expected a duration/);
  });
});

describe('ports', () => {
  it('reads dstack port forms', () => {
    const plan = load(yaml('type: task', 'commands: [a]', 'ports: [8000, "8080:80", "*:3000", "9000", {container_port: 22}, {container_port: 5, local_port: 6}]'));
    expect(plan.groups[0]?.ports).toEqual([
      { container_port: 8000, local_port: 8000 },
      { container_port: 80, local_port: 8080 },
      { container_port: 3000, local_port: null },
      { container_port: 9000, local_port: 9000 },
      { container_port: 22, local_port: null },
      { container_port: 5, local_port: 6 },
    ]);
  });

  it('refuses what is not a port', () => {
    expect(refusal(yaml('type: task', 'commands: [a]', 'ports: [70000]'))).toBe(
      'task.yml:3:9: ports[0]: the port must be a port number 1..65535, got a number (70000)',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'ports: ["8080:"]'))).toBe(
      'task.yml:3:9: ports[0]: expected a port such as 8000, "8080:8000" or "*:8000", got a string ("8080:")',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'ports:', '  - {container_port: 80, host: x}'))).toBe(
      'task.yml:4:26: ports[0].host: unknown field `host` in a port: expected `container_port` and `local_port`',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'ports:', '  - {container_port: 0}'))).toBe(
      'task.yml:4:22: ports[0].container_port: `container_port` must be a port number 1..65535, got a number (0)',
    );
  });
});

describe('resources in a config', () => {
  it('points at the offending resource field', () => {
    expect(refusal(yaml('type: task', 'groups:', '  - commands: [a]', '    resources:', '      gpu: A100:2:3'))).toBe(
      'task.yml:5:12: groups[0].resources.gpu: "A100:2:3" gives the GPU count twice ("3")',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'resources:', '  memory: 8GB..4GB'))).toBe(
      'task.yml:4:11: resources.memory: range 8..4 has its minimum above its maximum',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'resources:', '  gpu:', '    name: A100', '    vendor: ati'))).toBe(
      'task.yml:6:13: resources.gpu.vendor: unknown GPU vendor "ati": use nvidia, amd, google (tpu), intel or tenstorrent',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'resources:', '  gpu:', '    name: A100', '    model: x'))).toBe(
      'task.yml:6:5: resources.gpu.model: unknown field `model` in `gpu`: expected `vendor`, `name`, `count`, `memory`, `total_memory`, `compute_capability`',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'resources:', '  cpus: 4'))).toBe(
      'task.yml:4:3: resources.cpus: unknown field `cpus` in `resources` (did you mean `cpu`?)',
    );
  });

  it('refuses AMD, Intel and Tenstorrent GPUs without an image, naming the groups', () => {
    const text = yaml(
      'type: task',
      'groups:',
      '  - commands: [a]',
      '    resources: {gpu: MI300X}',
      '  - commands: [b]',
      '    resources: {gpu: L40S}',
      '  - commands: [c]',
      '    resources: {gpu: gaudi2}',
    );
    expect(refusal(text)).toBe(
      'task.yml:4:22: groups[0, 2]: `image` must be set when the requested accelerator is not supported by the default image (amd, intel): set `image` to one built for it',
    );
    expect(load(`image: rocm/pytorch\n${text}`).groups.map((g) => g.resources.gpu.vendor)).toEqual(['amd', 'nvidia', 'intel']);
    expect(refusal(yaml('type: task', 'commands: [a]', 'resources:', '  gpu: tt:2'))).toBe(
      'task.yml:4:8: resources.gpu: `image` must be set when the requested accelerator is not supported by the default image (tenstorrent): set `image` to one built for it',
    );
  });

  it('refuses an ARM CPU without an image, naming the groups', () => {
    const text = yaml(
      'type: task',
      'groups:',
      '  - commands: [a]',
      '    resources: {cpu: arm}',
      '  - commands: [b]',
      '  - commands: [c]',
      '    resources: {cpu: "arm:8"}',
    );
    expect(refusal(text)).toBe(
      'task.yml:4:22: groups[0, 2]: `image` must be set when an ARM CPU is requested: the default image is x86 only; set `image` to an ARM or multi-arch image',
    );
    expect(refusal(yaml('type: task', 'commands: [a]', 'resources: {cpu: arm:4}'))).toMatch(/^task\.yml:3:18: resources\.cpu: `image` must be set when an ARM CPU/);
    expect(load(`image: arm64v8/ubuntu\n${text}`).groups.map((g) => g.resources.cpu.arch)).toEqual(['arm', null, 'arm']);
  });

  it('validates but does not use top-level resources beside groups (as dstack)', () => {
    expect(load(yaml('type: task', 'resources: {gpu: 8}', 'groups:', '  - commands: [a]')).groups[0]?.resources.gpu.count).toEqual({
      min: 0,
      max: null,
    });
    expect(refusal(yaml('type: task', 'resources: {gpu: "8..4"}', 'groups:', '  - commands: [a]'))).toMatch(/^task\.yml:2:18: resources\.gpu: /);
  });
});

describe('values that reach a command line by name', () => {
  it.each(['--privileged', '$(id)', 'ubuntu\nx', 'Ubuntu', 'a'.repeat(600)])('image %j is refused', (image) => {
    expect(refusal(yaml('type: task', 'commands: [a]', `image: ${JSON.stringify(image)}`))).toMatch(/^task\.yml:3:8: image: /);
  });

  it.each(['ubuntu', 'lmsysorg/sglang:latest', 'localhost:5000/team/model:v1.2', `nvcr.io/nvidia/pytorch@sha256:${'a'.repeat(64)}`])(
    'image %j is taken',
    (image) => {
      expect(load(yaml('type: task', 'commands: [a]', `image: ${JSON.stringify(image)}`)).image).toBe(image);
    },
  );

  it.each(['../../x', '$(id)', '', '-f'])('fleet name %j is refused', (name) => {
    expect(refusal(yaml('type: task', 'commands: [a]', `fleets: [${JSON.stringify(name)}]`))).toMatch(/^task\.yml:3:10: fleets\[0\]: ".*" is not a fleet name/);
  });

  it('`${{ }}` in working_dir or ready.command is refused, saying where it is filled in', () => {
    const where = "`${{ ... }}` is filled in only in `commands`; here it would reach the node as written: use the job's environment ($DSTACK_NODES_IPS, $DSTACK_MASTER_NODE_IP…), or $${{ for a literal";
    expect(refusal(yaml('type: task', 'commands: [a]', 'working_dir: "/w/${{ groups[0].nodes[0].IP_ADDRESS }}"'))).toBe(`task.yml:3:14: working_dir: ${where}`);
    expect(
      refusal(yaml('type: task', 'groups:', '  - name: a', '    commands: [x]', '    ready: {command: "curl ${{ groups[0].nodes[0].IP_ADDRESS }}"}')),
    ).toBe(`task.yml:5:22: groups[0].ready.command: ${where}`);
  });
});

describe('secret_env (Troupe extension)', () => {
  it('marks any env var secret, and refuses a name the env does not have', () => {
    const plan = load(yaml('type: task', 'commands: [a]', 'env: [DB_ENDPOINT=x, MODEL=y]', 'secret_env: [DB_ENDPOINT]'));
    expect(plan.secret_env).toEqual(['DB_ENDPOINT']);
    expect(refusal(yaml('type: task', 'commands: [a]', 'env: [A=x]', 'secret_env: [A, NOPE]'))).toBe(
      'task.yml:4:17: secret_env[1]: "NOPE" is not in `env`: secret_env marks variables of the task\'s env as secret',
    );
  });
});
