import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { NoCapacityError, SubmissionClosedError } from '../../src/backends/backend';
import { localInstanceId, nodeLinkNames } from '../../src/backends/local/local-names';
import { JobLayout } from '../../src/runner/job-layout';
import { groupRequest, jobRef, LocalFleetHarness, makeRun } from './local-fixtures';

/** Capacity, address leases shared by several backends on one state directory, and what survives pid reuse. */

const h = new LocalFleetHarness();
afterAll(() => h.cleanup());

function leases(): string[] {
  const dir = join(h.stateDir, 'leases');
  return existsSync(dir) ? readdirSync(dir).filter((n) => !n.includes('.tmp-')) : [];
}

describe('local fleet capacity and leases', () => {
  it('refuses a batch past capacity with NoCapacityError and keeps nothing of it', async () => {
    const backend = h.backend({ network: 'netns', subnet: '10.213.251.0/24', capacity: 2 });
    const big = makeRun([{ name: 'big', nodes: 3, commands: ['true'] }]);
    h.track(big);
    await expect(backend.provision(groupRequest(big, 0))).rejects.toThrow(NoCapacityError);
    expect(leases()).toEqual([]);
    for (const job of big.jobs) {
      expect(existsSync(`/run/netns/${nodeLinkNames(localInstanceId(big.runId, 0, job.job_num)).netns}`)).toBe(false);
    }

    const fits = makeRun([{ name: 'fits', nodes: 2, commands: ['true'] }]);
    await h.provision(backend, fits);
    const more = makeRun([{ name: 'more', nodes: 1, commands: ['true'] }]);
    h.track(more);
    await expect(backend.provision(groupRequest(more, 0))).rejects.toThrow('the local fleet is full: 2 instances at most');
    await backend.releaseRun(fits.runId, fits.submission);
    expect(leases()).toEqual([]);
    await h.provision(backend, more);
    await backend.releaseRun(more.runId, more.submission);
  });

  it('never gives one address twice when several backends share the state directory', async () => {
    const backends = [0, 1, 2].map(() => h.backend({ network: 'loopback', subnet: '127.213.252.0/24' }));
    const runs = [0, 1, 2, 3, 4, 5].map(() => makeRun([{ name: 'g', nodes: 3, commands: ['true'] }]));
    const placed = await Promise.all(runs.flatMap((run) => backends.map((b) => h.provision(b, run))));
    // Every backend got the same instances for the same run…
    for (const [r] of runs.entries()) {
      const forRun = placed.slice(r * 3, r * 3 + 3);
      expect(forRun[1]).toEqual(forRun[0]);
      expect(forRun[2]).toEqual(forRun[0]);
    }
    // …and 18 jobs hold 18 different addresses, each with exactly one lease.
    const ips = placed.filter((_, i) => i % 3 === 0).flat().map((i) => i.internal_ip);
    expect(new Set(ips).size).toBe(18);
    expect(leases().filter((ip) => ip.startsWith('127.213.252.')).sort()).toEqual([...ips].sort());
    for (const run of runs) await backends[0]!.releaseRun(run.runId, run.submission);
    expect(leases()).toEqual([]);
  });

  it('reuses the address leased by a provision() that died before writing its instance, and releases orphans', async () => {
    const backend = h.backend({ network: 'loopback', subnet: '127.213.253.0/24' });
    const run = makeRun([{ name: 'g', nodes: 2, commands: ['true'] }]);
    h.track(run);
    // As a crashed provision() leaves it: job 0 leased an address, no record; job 7 of this submission never will be.
    mkdirSync(join(h.stateDir, 'leases'), { recursive: true });
    const lease = (instanceId: string) => JSON.stringify({ instance_id: instanceId, run_id: run.runId, submission: 0 });
    writeFileSync(join(h.stateDir, 'leases', '127.213.253.77'), lease(localInstanceId(run.runId, 0, 0)));
    writeFileSync(join(h.stateDir, 'leases', '127.213.253.78'), lease(localInstanceId(run.runId, 0, 7)));
    const instances = await h.provision(backend, run);
    expect(instances[0]!.internal_ip).toBe('127.213.253.77');
    expect(instances[1]!.internal_ip).toBe('127.213.253.1');
    await backend.releaseRun(run.runId, run.submission);
    expect(leases()).toEqual([]);
  });

  it('places one job per call without group provisioning, and refuses GPU jobs it cannot hold', async () => {
    const single = h.backend({ network: 'loopback', subnet: '127.213.254.0/24', groupProvisioning: false });
    expect(single.groupProvisioning).toBe(false);
    const run = makeRun([{ name: 'g', nodes: 2, commands: ['true'] }]);
    h.track(run);
    await expect(single.provision(groupRequest(run, 0))).rejects.toThrow('one job per call');
    const [first] = await single.provision(groupRequest(run, 0, [run.jobs[0]!]));
    expect(first!.gpus).toBe(0);

    const gpuRun = makeRun([{ name: 'gpu', nodes: 1, commands: ['true'], gpus: 2 }]);
    h.track(gpuRun);
    await expect(single.provision(groupRequest(gpuRun, 0))).rejects.toThrow(NoCapacityError);
    const pretend = h.backend({ network: 'loopback', subnet: '127.213.254.0/24', gpus: 8 });
    const [withGpus] = await pretend.provision(groupRequest(gpuRun, 0));
    expect(withGpus!.gpus).toBe(2);
  });

  it('does not take a later process with a reused pid for the job', async () => {
    const backend = h.backend({ network: 'loopback', subnet: '127.213.254.0/24' });
    const run = makeRun([{ name: 'g', nodes: 1, commands: ['true'] }]);
    const [instance] = await h.provision(backend, run);
    const ref = jobRef(run, 0, instance!);
    // The claim names this test's own pid with another start time: as if the job's pid had been reused.
    const started = join(backend.jobDirectory(ref), JobLayout.started);
    mkdirSync(started, { recursive: true });
    writeFileSync(join(started, JobLayout.pid), `${process.pid} 1\n`);
    expect(await backend.jobState(ref)).toEqual({ state: 'exited', pid: process.pid, exit_code: 137 });
    await backend.stopJob(ref, 0);
    // Still here: stopJob did not signal the process that now owns the pid.
    expect(await backend.jobState(ref)).toMatchObject({ state: 'exited' });
  });

  it('refuses provisioning for a released submission before touching anything', async () => {
    const backend = h.backend({ network: 'loopback', subnet: '127.213.254.0/24' });
    const run = makeRun([{ name: 'g', nodes: 1, commands: ['true'] }]);
    await backend.releaseRun(run.runId, 0);
    const before = leases().length;
    await expect(backend.provision(groupRequest(run, 0))).rejects.toThrow(SubmissionClosedError);
    expect(leases()).toHaveLength(before);
    // Another submission of the same run is not affected.
    await h.provision(backend, { ...run, submission: 1 });
  });
});
