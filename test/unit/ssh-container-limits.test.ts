import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { jobLimits, type JobLimits } from '../../src/backends/cgroup-limits';
import { containerLimitFlags, SHM_BYTES_DETAIL, shmBytesOf, shmBytesOfDetails } from '../../src/backends/ssh/container-limits';
import { CONTAINER_OOM_FILE, jobStateScript, renderContainerLaunchScript, resultOf } from '../../src/backends/ssh/job-scripts';
import { defaultResources } from '../../src/config/resources';

/**
 * A job with `image:` on an SSH host: the limits of its group's `resources` go to docker or podman
 * (the cgroup path's rule, jobLimits), and an OOM kill its runtime reports ends it with the
 * memory reason. The rendered launch.sh is run by bash here with a stand-in runtime on its PATH
 * (the only fake: no container engine on these machines) that records its arguments.
 */

const GiB = 1024 ** 3;
const withResources = (memory: { min: number | null; max: number | null }, cpus: { min: number | null; max: number | null }) => ({
  ...defaultResources(),
  memory,
  cpu: { ...defaultResources().cpu, count: cpus },
});

describe('container limit flags', () => {
  it('are the cgroup path\'s limits: `memory: 1GB, cpu: 1` is --memory/--memory-swap 1 GiB, --cpus 1, the pids limit', () => {
    const limits = jobLimits(withResources({ min: 1, max: 1 }, { min: 1, max: 1 }), 4096);
    expect(containerLimitFlags(limits, null)).toEqual(['--memory', String(GiB), '--memory-swap', String(GiB), '--cpus', '1', '--pids-limit', '4096']);
  });

  it('take a range\'s upper bound, else its lower bound, fractional CPUs as they are, and /dev/shm where given', () => {
    const limits = jobLimits(withResources({ min: 8, max: null }, { min: 0.5, max: 2.5 }), 100);
    expect(containerLimitFlags(limits, shmBytesOf({ shm_size: 1.5 }))).toEqual([
      '--memory', String(8 * GiB), '--memory-swap', String(8 * GiB), '--cpus', '2.5', '--pids-limit', '100', '--shm-size', String(1.5 * GiB),
    ]);
  });

  it('set no memory, CPU or shm flag where the group sets none (the pids limit always holds, as on the cgroup path)', () => {
    expect(containerLimitFlags({ memory_bytes: null, cpus: null, pids: 4096 }, null)).toEqual(['--pids-limit', '4096']);
    expect(shmBytesOf({ shm_size: null })).toBeNull();
  });

  it('read /dev/shm from the instance, refusing what is not a positive whole number', () => {
    expect(shmBytesOfDetails({})).toBeNull();
    expect(shmBytesOfDetails({ [SHM_BYTES_DETAIL]: '1073741824' })).toBe(GiB);
    expect(() => shmBytesOfDetails({ [SHM_BYTES_DETAIL]: '1; rm -rf /' })).toThrow();
  });
});

describe('launch.sh of a job with an image, run by bash with a stand-in runtime', () => {
  const root = mkdtempSync(join(tmpdir(), 'troupe-unit-climits-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  const bin = join(root, 'bin');
  mkdirSync(bin);
  // Records each call's arguments (NUL-separated, one file per subcommand); `run` runs bash with the words after the image; `inspect` says what OOM file holds.
  writeFileSync(
    join(bin, 'docker'),
    [
      '#!/bin/bash',
      `state=${JSON.stringify(root)}`,
      'printf "%s\\0" "$@" > "$state/$1.args"',
      'case $1 in',
      '  run) shift; while [ "$1" != --entrypoint ]; do shift; done; shift 3; exec bash "$@" ;;',
      '  inspect) cat "$state/oom-killed" 2>/dev/null || echo false ;;',
      'esac',
    ].join('\n'),
  );
  chmodSync(join(bin, 'docker'), 0o755);

  function launch(name: string, limits: JobLimits, shmBytes: number | null, commands: string, oomKilled: boolean) {
    const jobDir = join(root, name);
    mkdirSync(join(jobDir, 'work'), { recursive: true });
    writeFileSync(join(jobDir, 'job.env'), '');
    writeFileSync(join(jobDir, 'commands.sh'), commands);
    if (oomKilled) writeFileSync(join(root, 'oom-killed'), 'true\n');
    else rmSync(join(root, 'oom-killed'), { force: true });
    const script = renderContainerLaunchScript({ jobDir, image: "img'x:1", runtime: 'docker', containerName: `troupe-'${name}'`, limits, shmBytes });
    const out = spawnSync('bash', ['-c', script], { encoding: 'utf8', env: { PATH: `${bin}:/usr/bin:/bin` }, cwd: join(jobDir, 'work') });
    const args = (call: string) => readFileSync(join(root, `${call}.args`), 'utf8').split('\0').slice(0, -1);
    return { jobDir, out, args };
  }

  it('passes the limits to `docker run` as words of their own, and removes the container after reading its state', () => {
    const { out, args } = launch("we'ird $(x)", { memory_bytes: GiB, cpus: 1, pids: 4096 }, 2 * GiB, 'echo hi; exit 3', false);
    expect(out.status, out.stderr).toBe(3);
    expect(out.stdout).toBe('hi\n');
    const run = args('run');
    const after = (flag: string) => run[run.indexOf(flag) + 1];
    expect([after('--memory'), after('--memory-swap'), after('--cpus'), after('--pids-limit'), after('--shm-size')]).toEqual([String(GiB), String(GiB), '1', '4096', String(2 * GiB)]);
    expect(after('--name')).toBe("troupe-'we'ird $(x)'");
    expect(run).not.toContain('--rm');
    expect(args('inspect')).toEqual(['inspect', '--format', '{{.State.OOMKilled}}', "troupe-'we'ird $(x)'"]);
    expect(args('rm')).toEqual(['rm', '-f', "troupe-'we'ird $(x)'"]);
  });

  it('sets no memory or CPU flag where the job has no such limit', () => {
    const { out, args } = launch('nolimits', { memory_bytes: null, cpus: null, pids: 4096 }, null, 'true', false);
    expect(out.status, out.stderr).toBe(0);
    const run = args('run');
    for (const flag of ['--memory', '--memory-swap', '--cpus', '--shm-size']) expect(run).not.toContain(flag);
    expect(run).toContain('--pids-limit');
  });

  it('an OOM kill the runtime reports leaves the mark the job state reads as one OOM kill', () => {
    const { jobDir, out } = launch('oom', { memory_bytes: GiB, cpus: null, pids: 4096 }, null, 'kill -KILL $$', true);
    expect(out.status).toBe(137);
    expect(existsSync(join(jobDir, CONTAINER_OOM_FILE))).toBe(true);
    // As the wrapper leaves it once launch.sh has returned.
    mkdirSync(join(jobDir, 'started'));
    writeFileSync(join(jobDir, 'started', 'pid'), '999999999 1\n');
    writeFileSync(join(jobDir, 'exit_code'), '137\n');
    const state = execFileSync('bash', ['-c', jobStateScript(jobDir, 'ssh-none')], { encoding: 'utf8' });
    expect(resultOf(state)).toEqual(['exited', '999999999', '137', '1']);
    // A container the runtime did not report OOM-killed: no mark, none counted.
    const plain = launch('plain', { memory_bytes: GiB, cpus: null, pids: 4096 }, null, 'kill -KILL $$', false);
    expect(existsSync(join(plain.jobDir, CONTAINER_OOM_FILE))).toBe(false);
  });
});
