import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobVisibleTempDir } from '../helpers/local-fleet';
import { SubmissionClosedError } from '../../src/backends/backend';
import type { LocalBackend } from '../../src/backends/local/local-backend';
import { nodeMac } from '../../src/backends/local/netns';
import { cgroupDirs } from '../../src/backends/cgroup-limits';
import { cgroupHierarchy } from '../../src/backends/local/job-cgroup';
import { jobCgroupName } from '../../src/backends/local/local-names';
import { PREPARED_FILE } from '../../src/backends/local/node-preparation';
import { readProcStat } from '../../src/backends/local/proc';
import { JobLayout } from '../../src/runner/job-layout';
import { alive, groupRequest, hostPid, jobRef, LocalFleetHarness, makeRun, waitFor } from './local-fixtures';

/** The local fleet in netns mode, with real processes, namespaces and a bridge (needs root). */

const SUBNET = '10.213.250.0/24';
const h = new LocalFleetHarness();
const out = jobVisibleTempDir('troupe-local-out-');
// Written by the jobs, which run as their runs' own users (as root).
chmodSync(out, 0o1777);
let backend: LocalBackend;

beforeAll(async () => {
  backend = h.backend({ network: 'netns', subnet: SUBNET });
  expect(await backend.networkMode()).toBe('netns');
});

afterAll(async () => {
  await h.cleanup();
  rmSync(out, { recursive: true, force: true });
});

function lines(path: string): string[] {
  return existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter(Boolean) : [];
}

function httpGet(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    get(url, { timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve(body));
    }).on('error', reject);
  });
}

describe('local fleet, netns mode', () => {
  it('provisions a batch in one call, idempotently, each node in its own namespace', async () => {
    const run = makeRun([{ name: 'workers', nodes: 3, commands: ['true'] }]);
    h.track(run);
    const req = groupRequest(run, 0);
    const other = h.backend({ network: 'netns', subnet: SUBNET });
    const results = await Promise.all([backend.provision(req), backend.provision(req), other.provision(req)]);
    for (const r of results) h.track(run, r);
    expect(results[1]).toEqual(results[0]);
    expect(results[2]).toEqual(results[0]);
    const instances = results[0]!;
    expect(instances).toHaveLength(3);
    expect(new Set(instances.map((i) => i.internal_ip)).size).toBe(3);
    for (const [num, instance] of instances.entries()) {
      expect(instance.internal_ip).toMatch(/^10\.213\.250\.\d+$/);
      expect(existsSync(`/run/netns/${instance.details.netns}`)).toBe(true);
      // The MAC follows the address: a later node at this address keeps the peers' neighbour caches right.
      expect(execFileSync('ip', ['-n', instance.details.netns ?? '', 'link', 'show'], { encoding: 'utf8' })).toContain(`link/ether ${nodeMac(instance.internal_ip)} `);
      expect(await backend.runnerReady(jobRef(run, num, instance))).toBe(true);
    }
    expect(readdirSync(join(h.stateDir, 'leases')).filter((ip) => ip.startsWith('10.213.250.'))).toHaveLength(3);
    expect(await backend.provision(req)).toEqual(instances);
  });

  it('starts a job once however many starts race, and returns the same pid', async () => {
    const starts = join(out, 'starts');
    const run = makeRun([{ name: 'main', nodes: 1, commands: [`echo started >> ${starts}`, 'sleep 60'] }]);
    const instances = await h.provision(backend, run);
    const second = h.backend({ network: 'netns', subnet: SUBNET });
    const pids = await Promise.all([
      h.start(backend, run, instances),
      h.start(backend, run, instances),
      h.start(second, run, instances),
    ]);
    expect(new Set(pids.flat()).size).toBe(1);
    const pid = pids[0]![0]!;
    await waitFor('the command to run', async () => lines(starts).length > 0);
    await new Promise((r) => setTimeout(r, 500));
    expect(lines(starts)).toEqual(['started']);
    const ref = jobRef(run, 0, instances[0]!);
    expect(await backend.jobState(ref)).toEqual({ state: 'running', pid });
    // It leads its own session and process group, apart from the worker's.
    expect(await readProcStat(pid)).toMatchObject({ session: pid, pgrp: pid });
    await backend.stopJob(ref, 5);
    expect(await backend.jobState(ref)).toEqual({ state: 'exited', pid, exit_code: 143 });
    expect((await h.start(backend, run, instances))[0]).toBe(pid);
    expect(lines(starts)).toEqual(['started']);
  });

  it('stops the whole process group, and processes that left it, SIGKILL after the grace period', async () => {
    const pidsFile = join(out, 'pids');
    const run = makeRun([
      {
        name: 'main',
        nodes: 1,
        commands: [
          `sleep 300 & echo "child $!" >> ${pidsFile}`,
          `bash -c 'sleep 301 & echo "grandchild $!" >> ${pidsFile}; wait' &`,
          `(setsid sleep 302 & echo "own-session $!" >> ${pidsFile})`,
          `(setsid env -i sleep 303 & echo "own-session-no-env $!" >> ${pidsFile})`,
          `(trap '' TERM; exec sleep 304) & echo "ignores-term $!" >> ${pidsFile}`,
          'wait',
        ],
      },
    ]);
    const instances = await h.provision(backend, run);
    const [pid] = await h.start(backend, run, instances);
    const ref = jobRef(run, 0, instances[0]!);
    const printed = await waitFor('every child', async () => lines(pidsFile).length === 5 && lines(pidsFile));
    const children = new Map(
      await Promise.all(
        printed.map(async (line) => {
          const [name, childPid] = line.split(' ');
          return [name!, await hostPid(backend.jobDirectory(ref), Number(childPid))] as const;
        }),
      ),
    );
    await waitFor('the children to run', async () => (await Promise.all([...children.values()].map(alive))).every(Boolean));
    // The setsid ones really left the job's process group.
    expect((await readProcStat(children.get('own-session')!))?.pgrp).not.toBe(pid);
    expect((await readProcStat(children.get('own-session-no-env')!))?.pgrp).not.toBe(pid);
    const started = Date.now();
    await backend.stopJob(ref, 1);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    for (const [name, child] of [['wrapper', pid!] as const, ...children]) expect(await alive(child), name).toBe(false);
    expect((await backend.jobState(ref)).state).toBe('exited');
    await backend.stopJob(ref, 1);
  });

  it('records SIGKILL as exit code 137 when the commands ignore SIGTERM', async () => {
    const run = makeRun([{ name: 'main', nodes: 1, commands: [`trap '' TERM`, 'echo ready', 'sleep 300'] }]);
    const instances = await h.provision(backend, run);
    const [pid] = await h.start(backend, run, instances);
    const ref = jobRef(run, 0, instances[0]!);
    await waitFor('ready', async () => (await backend.readLog(ref, 0, 100)).data.includes('ready'));
    await backend.stopJob(ref, 0.5);
    expect(await alive(pid!)).toBe(false);
    expect(await backend.jobState(ref)).toEqual({ state: 'exited', pid, exit_code: 137 });
  });

  it('reports the exit code and serves the log by byte offset', async () => {
    const run = makeRun([{ name: 'main', nodes: 1, commands: ['echo "hello from $DSTACK_NODE_RANK"', 'echo "ünïcödé 🎭 ✓" >&2', 'exit 3'] }]);
    const instances = await h.provision(backend, run);
    const [pid] = await h.start(backend, run, instances);
    const ref = jobRef(run, 0, instances[0]!);
    const state = await waitFor('exit', async () => {
      const s = await backend.jobState(ref);
      return s.state === 'exited' && s;
    });
    expect(state).toEqual({ state: 'exited', pid, exit_code: 3 });
    const whole = await backend.readLog(ref, 0, 1 << 20);
    expect(whole.data).toBe('hello from 0\nünïcödé 🎭 ✓\n');
    expect(whole.next_offset).toBe(Buffer.byteLength(whole.data));
    let text = '';
    let offset = 0;
    for (;;) {
      const chunk = await backend.readLog(ref, offset, 5);
      if (chunk.next_offset === offset) break;
      expect(chunk.data).not.toContain('\uFFFD');
      text += chunk.data;
      offset = chunk.next_offset;
    }
    expect(text).toBe(whole.data);
    expect(await backend.readLog(ref, whole.next_offset, 100)).toEqual({ data: '', next_offset: whole.next_offset });
  });

  it('lets two nodes listen on 0.0.0.0:8000 and reach each other by the interpolated address', async () => {
    const serve = (name: string) => `"$NODE" -e 'require("http").createServer((q, s) => s.end("${name}")).listen(8000, "0.0.0.0")' &`;
    const fetchPeer = (name: string, peer: number) =>
      `until curl -sf http://\${{ groups[${peer}].nodes[0].IP_ADDRESS }}:8000/ > peer.txt; do sleep 0.1; done\necho "${name} got $(cat peer.txt)"`;
    const run = makeRun(
      [
        { name: 'alpha', nodes: 1, commands: [serve('alpha'), fetchPeer('alpha', 1), 'wait'] },
        { name: 'beta', nodes: 1, commands: [serve('beta'), fetchPeer('beta', 0), 'wait'] },
      ],
      { NODE: process.execPath },
    );
    const instances = await h.provision(backend, run);
    await h.start(backend, run, instances);
    const refs = instances.map((instance, num) => jobRef(run, num, instance));
    await waitFor('alpha to reach beta', async () => (await backend.readLog(refs[0]!, 0, 1000)).data.includes('alpha got beta'));
    await waitFor('beta to reach alpha', async () => (await backend.readLog(refs[1]!, 0, 1000)).data.includes('beta got alpha'));
    // The root namespace reaches them too, through the bridge.
    expect(await httpGet(`http://${instances[0]!.internal_ip}:8000/`)).toBe('alpha');
    expect(await httpGet(`http://${instances[1]!.internal_ip}:8000/`)).toBe('beta');
    // exec runs in the node's own namespace (its 127.0.0.1 is the node's), with the job's env.
    expect(await backend.exec(refs[0]!, 'curl -sf http://127.0.0.1:8000/; echo', 5000)).toEqual({ exit_code: 0, output: 'alpha' });
    expect(await backend.exec(refs[1]!, 'echo "$DSTACK_NODE_GROUP_NAME"; exit 4', 5000)).toEqual({ exit_code: 4, output: 'beta' });
    const slow = Date.now();
    expect(await backend.exec(refs[1]!, 'echo waiting; sleep 30', 300)).toEqual({ exit_code: 124, output: 'waiting' });
    expect(Date.now() - slow).toBeLessThan(5000);
    // A probe runs as the job does (as root, isolated): as its run's user, in its pid namespace.
    const [uid, pids] = (await backend.exec(refs[0]!, 'echo "$(id -u) $(ls /proc | grep -c "^[0-9]")"', 5000)).output.split(' ').map(Number);
    expect(uid).not.toBe(0);
    expect(pids).toBeLessThan(15);
    await Promise.all(refs.map((ref) => backend.stopJob(ref, 2)));
    for (const ref of refs) expect((await backend.jobState(ref)).state).toBe('exited');
  });

  it("names each node <group>-<i> at its own address, its peers too, and follows the live book's new addresses", async () => {
    const run = makeRun([
      { name: 'alpha', nodes: 1, commands: ['sleep 60'] },
      { name: 'beta', nodes: 1, commands: ['sleep 60'] },
    ]);
    const instances = await h.provision(backend, run);
    await h.start(backend, run, instances);
    const [alpha, beta] = instances.map((instance, num) => jobRef(run, num, instance));
    const [ipA, ipB] = instances.map((i) => i.internal_ip);
    const resolve = 'echo "$(hostname) $(getent hosts "$(hostname)" | cut -d" " -f1) $(getent hosts beta-0 beta-1 | cut -d" " -f1 | tr "\\n" " ")"';
    const first = await backend.exec(alpha!, resolve, 5000);
    expect(first.output, JSON.stringify(first)).toBe(`alpha-0 ${ipA} ${ipB}`);
    expect((await backend.exec(beta!, 'hostname', 5000)).output).toBe('beta-0');
    // No name server is reachable from a node: a name outside the run fails at once, not after timeouts.
    const asked = Date.now();
    expect((await backend.exec(alpha!, 'getent hosts no-such-node.example; echo $?', 5000)).output).toBe('2');
    expect(Date.now() - asked).toBeLessThan(2000);
    // beta-0 moves and beta-1 joins (a restart, a resize): alpha's /etc/hosts follows its peers.json.
    const node = (group_rank: number, ip: string) => ({ rank: 0, group_rank, ip, gpus: 0, attempt: 0, status: 'running', ready: true });
    const book = { version: 2, run_name: run.runName, groups: [
      { name: 'alpha', index: 0, nodes: [node(0, ipA!)] },
      { name: 'beta', index: 1, nodes: [node(0, '10.213.250.201'), node(1, '10.213.250.202')] },
    ] };
    await backend.writePeers(alpha!, { version: 2, json: JSON.stringify(book) });
    expect((await backend.exec(alpha!, resolve, 5000)).output).toBe(`alpha-0 ${ipA} 10.213.250.201 10.213.250.202`);
  });

  it('passes hostile env values to the process unchanged, and none of the worker\'s own variables', async () => {
    const envOut = join(out, 'env.json');
    const hostile = {
      QUOTES: `it's "double" '\\'' ''`,
      DOLLAR: `$HOME $(touch ${out}/PWNED1) \`touch ${out}/PWNED2\``,
      SEMICOLON: `; touch ${out}/PWNED3; echo`,
      NEWLINES: 'one\ntwo\n\nexport INJECTED=1\n',
      BACKSLASH: 'a\\b\\\\c\\n\\',
      EMPTY: '',
      UNICODE: 'naïve — 日本語 🎭',
    };
    process.env.TROUPE_TEST_WORKER_SECRET = 'not for jobs';
    try {
      const run = makeRun([{ name: 'main', nodes: 1, commands: [`"$NODE" -e 'require("fs").writeFileSync(process.argv[1], JSON.stringify(process.env))' ${envOut}`] }], {
        ...hostile,
        NODE: process.execPath,
      });
      const instances = await h.provision(backend, run);
      await h.start(backend, run, instances);
      const ref = jobRef(run, 0, instances[0]!);
      const state = await waitFor('exit', async () => {
        const s = await backend.jobState(ref);
        return s.state === 'exited' && s;
      });
      expect(state).toMatchObject({ exit_code: 0 });
      const seen = JSON.parse(readFileSync(envOut, 'utf8')) as Record<string, string>;
      for (const [name, value] of Object.entries(hostile)) expect(seen[name], name).toBe(value);
      expect(seen.INJECTED).toBeUndefined();
      expect(seen.TROUPE_TEST_WORKER_SECRET).toBeUndefined();
      expect(seen.DSTACK_NODES_IPS).toBe(instances[0]!.internal_ip);
      expect(seen.DSTACK_MPI_HOSTFILE).toBe(join(backend.jobDirectory(ref), JobLayout.hostfile));
      expect(readFileSync(seen.DSTACK_MPI_HOSTFILE!, 'utf8')).toBe(`${instances[0]!.internal_ip}\n`);
      for (const f of ['PWNED1', 'PWNED2', 'PWNED3']) expect(existsSync(join(out, f))).toBe(false);
    } finally {
      delete process.env.TROUPE_TEST_WORKER_SECRET;
    }
  });

  it('never starts a job that a stop claimed first', async () => {
    const marker = join(out, 'should-not-exist');
    const run = makeRun([{ name: 'main', nodes: 1, commands: [`touch ${marker}`] }]);
    const instances = await h.provision(backend, run);
    const ref = jobRef(run, 0, instances[0]!);
    await backend.stopJob(ref, 1);
    await expect(h.start(backend, run, instances)).rejects.toThrow(SubmissionClosedError);
    expect(await backend.jobState(ref)).toEqual({ state: 'absent' });
    expect(existsSync(marker)).toBe(false);
  });

  it('fails a start fast, with the reason, when the node\'s namespace is gone', async () => {
    const run = makeRun([{ name: 'main', nodes: 1, commands: ['true'] }]);
    const instances = await h.provision(backend, run);
    const ref = jobRef(run, 0, instances[0]!);
    execFileSync('ip', ['netns', 'del', instances[0]!.details.netns!]);
    expect(await backend.runnerReady(ref)).toBe(false);
    const started = Date.now();
    await expect(h.start(backend, run, instances)).rejects.toThrow('the job wrapper exited with');
    expect(Date.now() - started).toBeLessThan(5000);
    expect(readFileSync(join(backend.jobDirectory(ref), JobLayout.wrapperLog), 'utf8')).toContain(instances[0]!.details.netns!);
    // provision() of the same job sets the namespace up again.
    expect(await backend.provision(groupRequest(run, 0))).toEqual(instances);
    expect(await backend.runnerReady(ref)).toBe(true);
  });

  it('sets a node up for its start when its runner is ready, and leaves nothing of that when it never starts', async () => {
    const run = makeRun([{ name: 'main', nodes: 2, commands: ['echo started from its set-up'] }]);
    const instances = await h.provision(backend, run);
    const refs = instances.map((instance, num) => jobRef(run, num, instance));
    const hierarchy = await cgroupHierarchy();
    const cgroupsLeft = (num: number) =>
      hierarchy.version === null ? [] : cgroupDirs(hierarchy, jobCgroupName(h.stateDir, instances[num]!.instance_id)).filter((d) => existsSync(d));
    for (const ref of refs) expect(await backend.runnerReady(ref)).toBe(true);
    for (const [num, ref] of refs.entries()) {
      expect(existsSync(join(backend.jobDirectory(ref), PREPARED_FILE))).toBe(true);
      // The cgroup with its limits is made ahead (a machine without a usable hierarchy has none to make).
      if (hierarchy.version !== null) expect(cgroupsLeft(num)).not.toEqual([]);
    }
    // Asked again (a retried check), nothing changes.
    expect(await backend.runnerReady(refs[0]!)).toBe(true);
    await h.start(backend, run, instances, [0]);
    await waitFor('its end', async () => (await backend.jobState(refs[0]!)).state === 'exited');
    expect(await backend.jobState(refs[0]!)).toMatchObject({ exit_code: 0 });
    expect((await backend.readLog(refs[0]!, 0, 1000)).data).toContain('started from its set-up');
    await backend.releaseRun(run.runId, run.submission);
    for (const num of [0, 1]) expect(cgroupsLeft(num)).toEqual([]);
    // The never-started node: only the stop claim the release took, so a late start never runs.
    expect(readdirSync(backend.jobDirectory(refs[1]!))).toEqual([JobLayout.started]);
    expect(readdirSync(backend.jobDirectory(refs[0]!)).sort()).toEqual([JobLayout.exitCode, JobLayout.log, JobLayout.started]);
  });

  it('releaseRun stops every process, removes namespaces, links and leases, and refuses later provisioning', async () => {
    const run = makeRun([{ name: 'main', nodes: 2, commands: ['sleep 300 & sleep 301 & echo ready; wait'] }]);
    const instances = await h.provision(backend, run);
    const [pid] = await h.start(backend, run, instances, [0]);
    const refs = instances.map((instance, num) => jobRef(run, num, instance));
    await waitFor('ready', async () => (await backend.readLog(refs[0]!, 0, 100)).data.includes('ready'));
    const records = readdirSync(join(h.stateDir, 'instances')).length;
    await backend.releaseRun(run.runId, run.submission);
    expect(await alive(pid!)).toBe(false);
    expect(await backend.jobState(refs[0]!)).toMatchObject({ state: 'exited', exit_code: 143 });
    for (const instance of instances) {
      expect(existsSync(`/run/netns/${instance.details.netns}`)).toBe(false);
      expect(existsSync(`/sys/class/net/trplh${instance.details.netns!.slice('trpl-'.length)}`)).toBe(false);
      expect(existsSync(join(h.stateDir, 'leases', instance.internal_ip))).toBe(false);
    }
    expect(readdirSync(join(h.stateDir, 'instances'))).toHaveLength(records - 2);
    // Nothing secret at rest: the env file, scripts, hostfile and work directory are gone; the log stays.
    expect(readdirSync(backend.jobDirectory(refs[0]!)).sort()).toEqual([JobLayout.exitCode, JobLayout.log, JobLayout.started]);
    await expect(backend.provision(groupRequest(run, 0))).rejects.toThrow(SubmissionClosedError);
    await expect(h.start(backend, run, instances, [1])).rejects.toThrow(SubmissionClosedError);
    expect(await backend.runnerReady(refs[1]!)).toBe(false);
    expect((await backend.readLog(refs[0]!, 0, 100)).data).toContain('ready');
    await backend.releaseRun(run.runId, run.submission);
  });
});
