import { afterAll, describe, expect, it } from 'vitest';
import { noNewPrivsLine } from '../../src/backends/no-new-privs';
import type { LocalBackend } from '../../src/backends/local/local-backend';
import { jobRef, LocalFleetHarness, makeRun, waitFor } from './local-fixtures';

/**
 * Issue 37, part 2 on the local fleet: every process of a job (its commands, its probes) runs with
 * no_new_privs and cannot make a user namespace or mount a file system, isolated (as its run's
 * user) or not (then as the worker's user: root here); where the machine cannot apply that, the
 * job still runs and the first line of its log says why. (An SSH session into a node: local-privileges-run.test.ts.)
 */

const root = process.getuid?.() === 0;
const h = new LocalFleetHarness();

afterAll(async () => {
  await h.cleanup();
});

/** What a job prints of its own walls: one `name=value` line each. */
const CHECKS = [
  'echo "user=$(id -un)"',
  'echo "nnp=$(sed -n \'s/^NoNewPrivs:[[:space:]]*//p\' /proc/self/status)"',
  'unshare -Ur true 2>/dev/null; echo "userns=$?"',
  // Where the job may write, whoever it runs as: its own work directory; unmounted at once should it mount (in the machine's namespace, as root unisolated).
  'mkdir -p m && if mount -t tmpfs none m 2>/dev/null; then umount m; echo "mount=0"; else echo "mount=$?"; fi',
];

/** Runs `checks` as a one-node job of `fleet`; its log, and what a probe reads of its NoNewPrivs while it runs. */
async function runChecks(fleet: LocalBackend, checks = CHECKS): Promise<{ log: string; probe: string }> {
  const run = makeRun([{ name: 'a', nodes: 1, commands: [...checks, 'echo done=1', 'sleep 30'] }]);
  const instances = await h.provision(fleet, run);
  await h.start(fleet, run, instances);
  const ref = jobRef(run, 0, instances[0]!);
  await waitFor('the checks to print', async () => (await fleet.readLog(ref, 0, 10_000)).data.includes('done='));
  const probe = await fleet.exec(ref, "sed -n 's/^NoNewPrivs:[[:space:]]*//p' /proc/self/status", 5_000);
  await fleet.stopJob(ref, 1);
  const { data } = await fleet.readLog(ref, 0, 10_000);
  await fleet.releaseRun(run.runId, run.submission);
  return { log: data, probe: `${probe.exit_code} ${probe.output}` };
}

function lines(log: string): Record<string, string> {
  return Object.fromEntries(log.split('\n').flatMap((l) => (/^(\w+)=(.*)$/.exec(l) ? [[RegExp.$1, RegExp.$2]] : [])));
}

describe.skipIf(!root)("a local job's privileges (as root)", () => {
  it('an isolated job (its run\'s user): no_new_privs, no user namespace, no mount; its probe has no_new_privs too', async () => {
    const { log, probe } = await runChecks(h.backend({ network: 'loopback', subnet: '127.213.239.0/24', releaseGraceSeconds: 1 }));
    expect(lines(log)).toMatchObject({ nnp: '1', userns: '1', mount: '32' });
    expect(lines(log).user).toMatch(/^troupe-/);
    expect(probe).toBe('0 1');
  });

  it('a job that runs as root (isolation off): no_new_privs, no user namespace, and root cannot mount', async () => {
    const { log, probe } = await runChecks(h.backend({ network: 'loopback', subnet: '127.213.238.0/24', releaseGraceSeconds: 1, isolation: false }));
    expect(lines(log)).toEqual({ user: 'root', nnp: '1', userns: '1', mount: '32', done: '1' });
    expect(probe).toBe('0 1');
  });

  it('still runs where the machine cannot apply them, and the first line of its log says why', async () => {
    const why = 'no seccomp filter for riscv64';
    const fleet = h.backend({ network: 'loopback', subnet: '127.213.237.0/24', releaseGraceSeconds: 1, isolation: false, confinement: { walls: null, why } });
    // Not the mount: as root without the walls it would mount, in the machine's own mount namespace.
    const { log } = await runChecks(fleet, CHECKS.slice(0, 3));
    expect(log.startsWith(noNewPrivsLine(why))).toBe(true);
    expect(lines(log)).toEqual({ user: 'root', nnp: '0', userns: '0', done: '1' });
  });
});
