import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RunReaper } from '../../src/worker/run-reaper';
import { applyFleetYaml, expectAllClean, fleetYaml, startSshFleetEnv, waitForRun, type SshFleetEnv } from './ssh-fleet-fixtures';

/**
 * Runs on SSH fleets end to end: heterogeneous GPU hosts, a host behind a jump host, a host whose
 * key changed, and a host lost mid-run. After every test no job process is left on any host and
 * every host of the fleet is free.
 */

const H100 = (count: number) => ({ name: 'NVIDIA H100 80GB HBM3', memoryMiB: 81559, count });
const L40S = { name: 'NVIDIA L40S', memoryMiB: 46068, count: 1 };
const A10G = { name: 'NVIDIA A10G', memoryMiB: 23028, count: 1 };

let env: SshFleetEnv;
let fleetName: string | null = null;
let counter = 0;
/** Runs a test submitted: each stopped after all, so none outlives the file. */
const started: string[] = [];
const savedKnownHosts = process.env.TROUPE_KNOWN_HOSTS;

beforeAll(async () => {
  env = await startSshFleetEnv([
    { name: 'cpu' },
    { name: 'h100-a', gpus: H100(8) },
    { name: 'h100-b', gpus: H100(8) },
    { name: 'h100-c', gpus: H100(4) },
    { name: 'jumpbox' },
    { name: 'hidden', behindJump: 'jumpbox' },
    { name: 'keyed-a', gpus: L40S },
    { name: 'keyed-b', gpus: L40S },
    { name: 'doomed', gpus: A10G },
    { name: 'docker', containerRuntime: 'fake-docker' },
  ]);
  process.env.TROUPE_KNOWN_HOSTS = env.hosts.knownHostsFile;
});

afterEach(async () => {
  process.env.TROUPE_KNOWN_HOSTS = env.hosts.knownHostsFile;
  await expectAllClean(env, fleetName);
  if (fleetName) await env.fleets.delete(fleetName, { force: true });
  fleetName = null;
});

afterAll(async () => {
  for (const name of started) await env?.troupe.run(name).stop().catch(() => false);
  if (savedKnownHosts === undefined) delete process.env.TROUPE_KNOWN_HOSTS;
  else process.env.TROUPE_KNOWN_HOSTS = savedKnownHosts;
  await env?.close();
});

function names(prefix: string): { fleet: string; run: string } {
  counter += 1;
  const suffix = `${counter}-${env.taskQueue.slice(-6)}`;
  fleetName = `${prefix}-${suffix}`;
  return { fleet: fleetName, run: `${prefix}-run-${suffix}` };
}

function task(name: string, lines: string[]): string {
  return ['type: task', `name: ${name}`, ...lines, ''].join('\n');
}

describe('runs on SSH fleets', () => {
  it('runs 1 CPU host and 3 GPU hosts of 8, 8 and 4 GPUs: hostfile slots 8/8/4, the CPU line bare, 20 GPUs in all', async () => {
    const { fleet, run } = names('four');
    const state = await applyFleetYaml(env, fleetYaml(env, fleet, ['h100-a', 'cpu', 'h100-c', 'h100-b']));
    expect(state.hosts.map((h) => [h.status, h.host_key?.source, h.facts?.gpus[0]?.count ?? 0])).toEqual([
      ['ready', 'known_hosts', 8],
      ['ready', 'known_hosts', 0],
      ['ready', 'known_hosts', 4],
      ['ready', 'known_hosts', 8],
    ]);
    const out = env.dir;
    // Each node copies its hostfile and DSTACK_* variables where the test reads them (the hosts share this disk).
    const record = `cp "$DSTACK_MPI_HOSTFILE" ${out}/${run}.$DSTACK_NODE_RANK.hostfile && env | grep ^DSTACK_ > ${out}/${run}.$DSTACK_NODE_RANK.dstack`;
    const handle = await env.troupe.submit({
      yaml: task(run, [
        'groups:',
        '  - name: launcher',
        `    commands: ['${record}']`,
        '    resources: {cpu: 1.., disk: 1GB..}',
        '  - name: trainer',
        '    nodes: 2',
        `    commands: ['${record}']`,
        '    resources: {gpu: "H100:8", disk: 1GB..}',
        '  - name: evaluator',
        `    commands: ['${record}']`,
        '    resources: {gpu: "H100:4", disk: 1GB..}',
      ]),
      fleets: [fleet],
      checkWorkers: false,
    });
    const final = await handle.wait();
    expect(final.status, JSON.stringify(final, null, 2)).toBe('DONE');
    const address = (host: string) => env.hosts.host(host).address;
    expect(final.jobs.map((j) => [j.group_name, j.instance?.internal_ip, j.instance?.gpus])).toEqual([
      ['launcher', address('cpu'), 0],
      ['trainer', expect.stringMatching(new RegExp(`^(${address('h100-a')}|${address('h100-b')})$`)), 8],
      ['trainer', expect.stringMatching(new RegExp(`^(${address('h100-a')}|${address('h100-b')})$`)), 8],
      ['evaluator', address('h100-c'), 4],
    ]);
    const ips = final.jobs.map((j) => j.instance?.internal_ip ?? '');
    expect(new Set(ips).size).toBe(4);
    const expectedHostfile = `${ips[0]}\n${ips[1]} slots=8\n${ips[2]} slots=8\n${ips[3]} slots=4\n`;
    for (let rank = 0; rank < 4; rank++) {
      expect(readFileSync(join(out, `${run}.${rank}.hostfile`), 'utf8')).toBe(expectedHostfile);
      const dstack = Object.fromEntries(
        readFileSync(join(out, `${run}.${rank}.dstack`), 'utf8').trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
      );
      expect(dstack).toMatchObject({
        DSTACK_NODE_RANK: String(rank),
        DSTACK_NODES_NUM: '4',
        DSTACK_GPUS_NUM: '20',
        DSTACK_GPUS_PER_NODE: String([0, 8, 8, 4][rank]),
        DSTACK_MASTER_NODE_IP: ips[0],
      });
    }
  });

  it('a run terminated in Temporal: the reaper stops its job on the host and frees the host', async () => {
    const { fleet, run } = names('reaped');
    await applyFleetYaml(env, fleetYaml(env, fleet, ['cpu']));
    const handle = await env.troupe.submit({
      yaml: task(run, ['commands: [\'while true; do sleep 0.2; done\']', 'resources: {cpu: 1.., disk: 1GB..}']),
      fleets: [fleet],
      checkWorkers: false,
    });
    await waitForRun(env, run, (s) => s.status === 'RUNNING');
    expect((await env.fleets.state(fleet))?.hosts[0]?.holder).toMatchObject({ run_name: run, run_workflow_id: handle.workflowId });
    expect(await env.hosts.jobProcesses('cpu')).not.toEqual([]);
    await env.client.workflow.getHandle(handle.workflowId).terminate('test: terminated from outside Troupe');

    const logs: string[] = [];
    const reaper = new RunReaper({ client: env.client, backends: { ssh: env.backend }, log: (line) => logs.push(line) });
    const reaped = await reaper.reapOnce();
    expect(reaped.map((r) => [r.backend, r.run.run_workflow_id, r.closedAs, r.run.holds])).toEqual([['ssh', handle.workflowId, 'TERMINATED', '1 host of SSH fleets']]);
    expect(logs).toHaveLength(1);
    // afterEach: no job process on any host, every host of the fleet free.
  });

  it('runs a job on a host reachable only through its proxy_jump host', async () => {
    const { fleet, run } = names('jump');
    const hidden = env.hosts.host('hidden');
    const jumpbox = env.hosts.host('jumpbox');
    // Only the jump host's key is in known_hosts: the hidden host's is pinned, through the jump.
    const knownHosts = join(env.dir, 'known_hosts-jump');
    writeFileSync(knownHosts, `${env.hosts.knownHostsLine('jumpbox')}\n`);
    process.env.TROUPE_KNOWN_HOSTS = knownHosts;
    const state = await applyFleetYaml(env, fleetYaml(env, fleet, ['hidden']));
    const [host] = state.hosts;
    expect(host?.status, host?.reason ?? '').toBe('ready');
    expect(host?.internal_ip).toBe(hidden.address);
    expect(host?.host_key).toMatchObject({ fingerprint: hidden.hostKeyFingerprint, source: 'pinned' });
    expect(host?.jump_host_key).toMatchObject({ fingerprint: jumpbox.hostKeyFingerprint, source: 'known_hosts' });

    const marker = join(env.dir, `${run}.out`);
    const handle = await env.troupe.submit({
      yaml: task(run, [`commands: ['ip -4 -o addr show dev eth0 | grep -o "inet [0-9.]*" > ${marker}']`, 'resources: {cpu: 1.., disk: 1GB..}']),
      fleets: [fleet],
      checkWorkers: false,
    });
    const final = await handle.wait();
    expect(final.status, JSON.stringify(final.jobs, null, 2)).toBe('DONE');
    expect(final.jobs[0]?.instance?.host).toBe(hidden.address);
    // The commands ran in the hidden host's own network namespace.
    expect(readFileSync(marker, 'utf8').trim()).toBe(`inet ${hidden.address}`);
  });

  it('refuses a host whose key changed: the fleet shows it unreachable, and a run needing it gets no capacity naming it', async () => {
    const { fleet, run } = names('keys');
    // keyed-a is verified by known_hosts; keyed-b is known nowhere and gets pinned.
    const knownHosts = join(env.dir, 'known_hosts-keys');
    writeFileSync(knownHosts, `${env.hosts.knownHostsLine('keyed-a')}\n`);
    process.env.TROUPE_KNOWN_HOSTS = knownHosts;
    const yaml = fleetYaml(env, fleet, ['keyed-a', 'keyed-b']);
    const first = await applyFleetYaml(env, yaml);
    expect(first.hosts.map((h) => [h.status, h.host_key?.source])).toEqual([
      ['ready', 'known_hosts'],
      ['ready', 'pinned'],
    ]);

    await env.hosts.changeHostKey('keyed-a');
    await env.hosts.changeHostKey('keyed-b');
    const again = await applyFleetYaml(env, yaml);
    const [a, b] = again.hosts;
    expect(a?.status).toBe('unreachable');
    expect(a?.reason).toContain(`HOST KEY CHANGED for root@${env.hosts.host('keyed-a').address}:22`);
    expect(a?.reason).toContain(`but the host presents ssh-ed25519 ${env.hosts.host('keyed-a').hostKeyFingerprint}`);
    expect(a?.reason).toContain(`${knownHosts}:1`);
    expect(b?.status).toBe('unreachable');
    expect(b?.reason).toContain(`HOST KEY CHANGED for root@${env.hosts.host('keyed-b').address}:22`);
    expect(b?.reason).toMatch(/the key pinned at first contact on \d{4}-/);
    expect(b?.reason).toContain('ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub');
    // The key verified before is kept: re-applying does not pin the new one.
    expect(b?.host_key?.fingerprint).toBe(first.hosts[1]?.host_key?.fingerprint);

    const handle = await env.troupe.submit({
      yaml: task(run, ['commands: [echo never]', 'resources: {gpu: L40S, disk: 1GB..}']),
      fleets: [fleet],
      checkWorkers: false,
    });
    const final = await handle.wait();
    expect(final.status).toBe('FAILED');
    const [job] = final.jobs;
    expect(job?.termination_reason).toBe('FAILED_TO_START_DUE_TO_NO_CAPACITY');
    expect(job?.message).toContain(`no capacity in fleet ${fleet} for group 0`);
    expect(job?.message).toContain(`${env.hosts.host('keyed-a').address}: unreachable (HOST KEY CHANGED`);
    expect(job?.message).toContain(`${env.hosts.host('keyed-b').address}: unreachable (HOST KEY CHANGED`);
  });

  it('runs a task with an image through docker on the host, and fails it at once, naming the host, where there is none', async () => {
    const { fleet, run } = names('image');
    await applyFleetYaml(env, fleetYaml(env, fleet, ['docker']));
    const yaml = task(run, ['image: python:3.11-slim', 'commands: [echo "in image $DSTACK_NODE_RANK"]', 'resources: {cpu: 1.., disk: 1GB..}']);
    const final = await (await env.troupe.submit({ yaml, fleets: [fleet], checkWorkers: false })).wait();
    expect(final.status, JSON.stringify(final.jobs, null, 2)).toBe('DONE');
    const runs = await env.hosts.dockerRuns('docker');
    expect(runs).toHaveLength(1);
    expect(runs[0]).toEqual(expect.arrayContaining(['--network', 'host', 'python:3.11-slim']));

    // The same task on a fleet whose host has neither docker nor podman.
    await env.fleets.delete(fleet, { force: false });
    const other = names('noimage');
    await applyFleetYaml(env, fleetYaml(env, other.fleet, ['cpu']));
    const started = Date.now();
    const failed = await (
      await env.troupe.submit({ yaml: yaml.replace(`name: ${run}`, `name: ${other.run}`), fleets: [other.fleet], checkWorkers: false })
    ).wait();
    expect(failed.status).toBe('FAILED');
    expect(failed.jobs[0]?.message).toContain(
      `image python:3.11-slim cannot run on root@${env.hosts.host('cpu').address}:22: the host has neither docker nor podman`,
    );
    expect(Date.now() - started).toBeLessThan(20_000);
  });

  it("gives an image job its group's limits through `docker run`, and fails it with the memory reason when docker reports an OOM kill", async () => {
    // The stand-in docker (fake-docker.ts) is the only fake: no container engine on these machines, so the limits
    // are shown to reach `docker run`, not enforced; its `inspect` reports the OOM kill asked for below.
    // Ranges open above (an SSH host must lie in the range, and this one has more): the limits are their lower bounds.
    const { fleet, run } = names('climits');
    await applyFleetYaml(env, fleetYaml(env, fleet, ['docker']));
    const before = (await env.hosts.dockerRuns('docker')).length;
    await env.hosts.dockerReportsOomNext('docker');
    const yaml = task(run, ['image: python:3.11-slim', "commands: ['echo big; kill -KILL $$']", 'resources: {memory: 1GB.., cpu: 1.., shm_size: 2GB, disk: 1GB..}']);
    const handle = await env.troupe.submit({ yaml, fleets: [fleet], checkWorkers: false });
    started.push(run);
    const final = await handle.wait();
    const args = (await env.hosts.dockerRuns('docker'))[before] ?? [];
    const after = (flag: string) => args[args.indexOf(flag) + 1];
    expect([after('--memory'), after('--memory-swap'), after('--cpus'), after('--pids-limit'), after('--shm-size')]).toEqual([
      String(1024 ** 3), String(1024 ** 3), '1', '4096', String(2 * 1024 ** 3),
    ]);
    expect(final.status, JSON.stringify(final.jobs, null, 2)).toBe('FAILED');
    expect(final.jobs[0]).toMatchObject({ status: 'FAILED', exit_code: 137, message: 'out of memory: limit 1 GiB (exit code 137)' });
  });

  it('fails a run whose host is lost mid-run (INSTANCE_UNREACHABLE), cleans up the others, and frees every host', async () => {
    const { fleet, run } = names('lost');
    await applyFleetYaml(env, fleetYaml(env, fleet, ['cpu', 'h100-c', 'doomed']));
    const handle = await env.troupe.submit({
      yaml: task(run, [
        'groups:',
        '  - name: head',
        "    commands: ['sleep 300 & setsid sleep 301 & wait']",
        '    resources: {cpu: 1.., disk: 1GB..}',
        '  - name: worker',
        "    commands: ['sleep 300']",
        '    resources: {gpu: H100, disk: 1GB..}',
        '  - name: edge',
        "    commands: ['sleep 300']",
        '    resources: {gpu: A10G, disk: 1GB..}',
      ]),
      fleets: [fleet],
      checkWorkers: false,
      options: { stop_grace_s: 2 },
    });
    await waitForRun(env, run, (s) => s.jobs.every((j) => j.status === 'RUNNING'));
    expect((await env.hosts.jobProcesses('cpu')).map((p) => p.command)).toEqual(expect.arrayContaining(['sleep 300', 'sleep 301']));

    const lostAt = Date.now();
    await env.hosts.stopHost('doomed');
    const final = await handle.wait();
    console.log(`host lost → run ${final.status} in ${Date.now() - lostAt} ms`);
    expect(final.status).toBe('FAILED');
    expect(final.termination_reason).toBe('JOB_FAILED');
    const edge = final.jobs.find((j) => j.group_name === 'edge');
    expect(edge?.termination_reason).toBe('INSTANCE_UNREACHABLE');
    expect(edge?.message).toContain(env.hosts.host('doomed').address);
    for (const job of final.jobs.filter((j) => j.group_name !== 'edge')) expect(job.termination_reason).toBe('TERMINATED_BY_SERVER');

    // Every host free; the lost one is marked unreachable until the fleet is applied again.
    const state = await env.fleets.state(fleet);
    expect(state?.hosts.map((h) => [h.spec.target.hostname, h.holder, h.status])).toEqual([
      [env.hosts.host('cpu').address, null, 'ready'],
      [env.hosts.host('h100-c').address, null, 'ready'],
      [env.hosts.host('doomed').address, null, 'unreachable'],
    ]);
    expect(state?.hosts[2]?.reason).toContain(`lost while ${run}/job 2 ran on it`);
    // On the surviving hosts only the logs (and exit codes) of the run are left.
    for (const name of ['cpu', 'h100-c']) {
      const runDir = join(env.hosts.host(name).jobBaseDir, final.run_uid);
      const files = readdirSync(runDir, { recursive: true, withFileTypes: true }).filter((f) => f.isFile()).map((f) => f.name);
      expect(files.filter((f) => !['log', 'exit_code', '.released'].includes(f)), `files left in ${runDir}`).toEqual([]);
      expect(files).toContain('log');
    }
  });
});
