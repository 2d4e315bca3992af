import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cgroupDirs } from '../../src/backends/cgroup-limits';
import { cgroupHierarchy } from '../../src/backends/local/job-cgroup';
import { LocalBackend } from '../../src/backends/local/local-backend';
import { jobCgroupName } from '../../src/backends/local/local-names';
import { stopRunsLeftGoing, useLocalTroupe } from '../helpers/local-troupe';
import { twoNodeTask } from '../helpers/inter-node-ssh';

/**
 * Issue 37, part 1, through a whole run on the local fleet (netns, as root): an SSH session a peer
 * opens on a node runs in that node's cgroup, and a node the kernel kills for its memory ends the
 * run FAILED with the limit named where `troupe ps` reads it.
 */

const hierarchy = await cgroupHierarchy();
const usable = hierarchy.version === null ? null : hierarchy;
const stateDir = mkdtempSync(join(tmpdir(), 'troupe-limits-'));
const backend = new LocalBackend({ stateDir, network: 'netns' });
const env = useLocalTroupe({ stateDir, backend, remove: () => rmSync(stateDir, { recursive: true, force: true }) });
const started: string[] = [];

afterAll(async () => {
  await stopRunsLeftGoing(env.troupe, started);
});

describe.skipIf(!usable || process.getuid?.() !== 0)('a run whose node outgrows its memory limit (local fleet, netns)', () => {
  it("ends FAILED with 'out of memory: limit 256 MiB'; the peer's SSH session ran in the peer's cgroup; no cgroup is left", async () => {
    const name = `oom-${env.worker.taskQueue.slice(-8)}`;
    const head = [
      'ssh "$(sed -n 2p <<< "$DSTACK_NODES_IPS")" cat /proc/self/cgroup | sed -n "s/^[0-9]*:memory:/peer-session-memory-cgroup=/p"',
      'perl -e \'$x = "x" x (512 * 1024 * 1024); sleep 1\'',
      'echo survived',
    ];
    started.push(name);
    const handle = await env.troupe.submit({ yaml: twoNodeTask(name, head, [], { memory: '256MB', cpu: '1' }), runName: name });
    const state = await handle.wait();
    expect(state.status).toBe('FAILED');
    const job = state.jobs[0]!;
    expect(job.status).toBe('FAILED');
    expect(job).toMatchObject({ termination_reason: 'CONTAINER_EXITED_WITH_ERROR', exit_code: 137, message: 'out of memory: limit 256 MiB (exit code 137)' });
    const log = (await env.troupe.run(name).readLog(0)).data;
    expect(log).not.toContain('survived');
    const peer = state.jobs[1]!.instance!.instance_id;
    // v1: the memory hierarchy's line names the group; v2 has no such line (the test reads v1's).
    if (usable!.version === 1) expect(log).toContain(`peer-session-memory-cgroup=/troupe/${jobCgroupName(stateDir, peer)}\n`);
    for (const j of state.jobs) {
      const left = cgroupDirs(usable!, jobCgroupName(stateDir, j.instance!.instance_id)).filter((d) => existsSync(d));
      expect(left).toEqual([]);
    }
  });
});
