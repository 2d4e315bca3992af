import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Instance, JobRef, PeersFile } from '../../src/backends/backend';
import type { LocalBackend } from '../../src/backends/local/local-backend';
import { lookupUser, runUserName } from '../../src/backends/local/run-user';
import { JobLayout } from '../../src/runner/job-layout';
import { alive, groupRequest, jobRef, LocalFleetHarness, makeRun, runJobFiles, waitFor, type TestRun } from './local-fixtures';

/**
 * Attempts of one node on the local fleet (real processes; as root: namespaces, isolated run
 * users): a replacement coexists with the machine it replaces, each with its own instance, address,
 * directory and log; releaseJob gives back one attempt alone; peers.json is replaced atomically,
 * never by an older version, readable inside the job and by no other run.
 */

const root = process.getuid?.() === 0;
const h = new LocalFleetHarness();

afterAll(async () => {
  await h.cleanup();
});

const LOOP = 'echo "up rank=$DSTACK_NODE_RANK"; while true; do sleep 0.2; done';

function book(version: number): PeersFile {
  return { version, json: JSON.stringify({ version, groups: [{ name: 'b', nodes: [{ ip: `10.0.0.${version}` }] }] }) };
}

/** Starts one job (attempt as in `ref`), with `peers` as its first book, as the start activity would. */
async function start(backend: LocalBackend, run: TestRun, ref: JobRef, ips: string[], peers: PeersFile | null): Promise<number> {
  const files = runJobFiles(run, ref.job_num, ips, backend.jobDirectory(ref));
  return (await backend.startJob(ref, { ...files, peers })).pid;
}

async function attempt(backend: LocalBackend, run: TestRun, jobNum: number, k: number): Promise<{ instance: Instance; ref: JobRef }> {
  const job = run.jobs[jobNum]!;
  const [instance] = await backend.provision(groupRequest(run, job.node_group_index, [{ ...job, attempt: k }]));
  h.track(run, [instance!]);
  return { instance: instance!, ref: { ...jobRef(run, jobNum, instance!), attempt: k } };
}

const modes = [
  { name: 'netns, isolated (as root)', skip: !root, options: { network: 'netns' as const, subnet: '10.213.249.0/24' }, isolated: true },
  { name: 'loopback, not isolated', skip: false, options: { network: 'loopback' as const, subnet: '127.213.249.0/24', isolation: false }, isolated: false },
];

describe.each(modes)('local fleet job attempts, $name', ({ skip, options, isolated }) => {
  it.skipIf(skip)('runs two attempts of a node side by side, releases one alone, and keeps its log', async () => {
    const backend = h.backend(options);
    const run = makeRun([
      { name: 'a', nodes: 1, commands: [LOOP] },
      { name: 'b', nodes: 1, commands: [LOOP] },
    ]);
    const instances = await h.provision(backend, run);
    const ips = instances.map((i) => i.internal_ip);
    const [ref0, ref1] = instances.map((instance, num) => jobRef(run, num, instance)) as [JobRef, JobRef];
    const pids = [await start(backend, run, ref0, ips, book(1)), await start(backend, run, ref1, ips, book(1))];

    // Attempt 1 of job 1, while attempt 0 still holds its machine: another instance, address, directory.
    const next = await attempt(backend, run, 1, 1);
    expect(next.instance.instance_id).not.toBe(instances[1]!.instance_id);
    expect(next.instance.internal_ip).not.toBe(instances[1]!.internal_ip);
    if (isolated) expect(next.instance.details.netns).not.toBe(instances[1]!.details.netns);
    expect((await attempt(backend, run, 1, 1)).instance).toEqual(next.instance);
    // Attempt 0 reads as before attempts existed.
    expect((await backend.provision(groupRequest(run, 1)))[0]).toEqual(instances[1]);
    expect(backend.jobDirectory(next.ref)).toBe(`${backend.jobDirectory(ref1)}.attempt-1`);
    const nextPid = await start(backend, run, next.ref, [ips[0]!, next.instance.internal_ip], book(2));
    for (const ref of [ref1, next.ref]) {
      await waitFor('both attempts to log', async () => (await backend.readLog(ref, 0, 1000)).data.includes('up rank=1'));
    }
    expect(await backend.jobState(ref1)).toMatchObject({ state: 'running' });
    expect(await backend.jobState(next.ref)).toMatchObject({ state: 'running', pid: nextPid });

    // Giving back attempt 0 of job 1 leaves job 0 and the new attempt running.
    const leases = join(h.stateDir, 'leases');
    expect(existsSync(join(leases, instances[1]!.internal_ip))).toBe(true);
    await backend.releaseJob(ref1, 1);
    expect(await alive(pids[1]!)).toBe(false);
    expect(await backend.jobState(ref1)).toMatchObject({ state: 'exited' });
    expect(await backend.jobState(ref0)).toMatchObject({ state: 'running', pid: pids[0] });
    expect(await backend.jobState(next.ref)).toMatchObject({ state: 'running', pid: nextPid });
    expect(readdirSync(backend.jobDirectory(ref1)).sort()).toEqual([JobLayout.exitCode, JobLayout.log, JobLayout.started]);
    expect((await backend.readLog(ref1, 0, 1000)).data).toContain('up rank=1');
    expect(existsSync(join(leases, instances[1]!.internal_ip))).toBe(false);
    expect(existsSync(join(h.stateDir, 'instances', `${instances[1]!.instance_id}.json`))).toBe(false);
    if (isolated) {
      expect(existsSync(`/run/netns/${instances[1]!.details.netns}`)).toBe(false);
      expect(await lookupUser(runUserName(run.runId, run.submission))).not.toBeNull();
    }
    // Idempotent; a released attempt's peers are left alone (its directory keeps only what release keeps).
    await backend.releaseJob(ref1, 1);
    await backend.writePeers(ref1, book(9));
    expect(existsSync(join(backend.jobDirectory(ref1), JobLayout.peers))).toBe(false);
    // Its address is free again: the next attempt may take it.
    const third = await attempt(backend, run, 0, 1);
    expect(third.instance.internal_ip).toBe(instances[1]!.internal_ip);
    await backend.releaseJob(third.ref, 1);

    await backend.releaseRun(run.runId, run.submission);
    for (const pid of [pids[0]!, nextPid]) expect(await alive(pid)).toBe(false);
    for (const ref of [ref0, ref1, next.ref]) {
      expect(readdirSync(backend.jobDirectory(ref)).sort()).toEqual([JobLayout.exitCode, JobLayout.log, JobLayout.started]);
    }
    expect((await backend.readLog(next.ref, 0, 1000)).data).toContain('up rank=1');
  });

  it.skipIf(skip)('replaces peers.json atomically, never by an older version; the job reads it through TROUPE_PEERS_FILE', async () => {
    const backend = h.backend(options);
    const run = makeRun([{ name: 'a', nodes: 1, commands: [LOOP] }]);
    const [instance] = await h.provision(backend, run);
    const ref = jobRef(run, 0, instance!);
    await start(backend, run, ref, [instance!.internal_ip], book(1));
    const path = join(backend.jobDirectory(ref), JobLayout.peers);
    expect(JSON.parse(readFileSync(path, 'utf8'))).toMatchObject({ version: 1 });

    const before = statSync(path).ino;
    await backend.writePeers(ref, book(3));
    expect(statSync(path).ino).not.toBe(before);
    expect(readFileSync(path, 'utf8')).toBe(book(3).json);
    await backend.writePeers(ref, book(2));
    expect(readFileSync(path, 'utf8')).toBe(book(3).json);
    // Retried and reordered writes, all at once (two backends: two writers): the highest wins.
    const other = h.backend(options);
    const versions = [7, 4, 12, 5, 11, 6, 9, 8, 10];
    await Promise.all(versions.map((v, i) => (i % 2 ? other : backend).writePeers(ref, book(v))));
    expect(readFileSync(path, 'utf8')).toBe(book(12).json);
    expect(readdirSync(backend.jobDirectory(ref)).filter((n) => n.includes('.tmp-') || n.includes('lock'))).toEqual([]);

    const stat = statSync(path);
    if (isolated) {
      const user = await lookupUser(runUserName(run.runId, run.submission));
      expect(stat.mode & 0o777).toBe(0o640);
      expect(stat.uid).toBe(0);
      expect(stat.gid).toBe(user!.gid);
    } else {
      expect(stat.mode & 0o777).toBe(0o644);
    }
    // Inside the job (its namespaces, its user, its env), the path it was given holds the latest book.
    const inside = await backend.exec(ref, 'echo "$TROUPE_PEERS_FILE"; cat "$TROUPE_PEERS_FILE" >/dev/null && echo readable', 10_000);
    expect(inside).toEqual({ exit_code: 0, output: path });
    const read = await backend.exec(ref, 'cat "$TROUPE_PEERS_FILE"', 10_000);
    expect(read).toEqual({ exit_code: 0, output: book(12).json });

    if (isolated) {
      // Another run's job cannot read it.
      const stranger = makeRun([{ name: 'a', nodes: 1, commands: [LOOP] }]);
      const [theirs] = await h.provision(backend, stranger);
      const theirRef = jobRef(stranger, 0, theirs!);
      await start(backend, stranger, theirRef, [theirs!.internal_ip], null);
      expect((await backend.exec(theirRef, 'id -u', 10_000)).output).not.toBe('0');
      const peek = await backend.exec(theirRef, `cat ${path} && echo LEAKED`, 10_000);
      expect(peek.exit_code).not.toBe(0);
      expect(peek.output).not.toContain('LEAKED');
      expect(existsSync(join(backend.jobDirectory(theirRef), JobLayout.peers))).toBe(false);
      await backend.releaseRun(stranger.runId, stranger.submission);
    }
    await backend.releaseRun(run.runId, run.submission);
    expect(existsSync(path)).toBe(false);
    await backend.writePeers(ref, book(13));
    expect(existsSync(path)).toBe(false);
  });
});
