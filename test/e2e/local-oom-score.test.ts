import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { JOB_OOM_SCORE_ADJ } from '../../src/runner/job-wrapper';
import { jobRef, LocalFleetHarness, makeRun, waitFor } from './local-fixtures';

/**
 * Issue 29, finding 5 (the part this machine allows): a job's processes carry a higher OOM score
 * than the worker's, so under memory pressure the kernel kills a job's process first; an isolated
 * job (its run's user) cannot lower it again where the worker has CAP_SYS_RESOURCE (else not
 * below the worker's).
 */

const root = process.getuid?.() === 0;
const h = new LocalFleetHarness();

afterAll(async () => {
  await h.cleanup();
});

/** CAP_SYS_RESOURCE (bit 24) in this process's effective set: what makes root's OOM score a floor. */
function hasSysResource(): boolean {
  const hex = /^CapEff:\s+([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0';
  return ((BigInt(`0x${hex}`) >> 24n) & 1n) === 1n;
}

const PROBE = [
  'echo "adj $(cat /proc/self/oom_score_adj)"',
  'if echo 0 > /proc/self/oom_score_adj 2>/dev/null; then echo "lowered $(cat /proc/self/oom_score_adj)"; else echo "kept $(cat /proc/self/oom_score_adj)"; fi',
  'sleep 0.2',
].join('\n');

describe.skipIf(!root)('a job\'s OOM score (local fleet, isolated, as root)', () => {
  it('is raised above the worker\'s, and the job cannot lower it below the worker\'s', async () => {
    const worker = Number(readFileSync('/proc/self/oom_score_adj', 'utf8'));
    expect(worker).toBeLessThan(JOB_OOM_SCORE_ADJ);
    const backend = h.backend({ network: 'loopback', subnet: '127.213.245.0/24', releaseGraceSeconds: 1 });
    const run = makeRun([{ name: 'a', nodes: 1, commands: [PROBE] }]);
    const instances = await h.provision(backend, run);
    await h.start(backend, run, instances);
    const ref = jobRef(run, 0, instances[0]!);
    const log = await waitFor('the job to report', async () => {
      const { data } = await backend.readLog(ref, 0, 10_000);
      return /^(kept|lowered) /m.test(data) && data;
    });
    expect(log).toContain(`adj ${JOB_OOM_SCORE_ADJ}\n`);
    if (hasSysResource()) {
      expect(log).toContain(`kept ${JOB_OOM_SCORE_ADJ}\n`);
    } else {
      // Without CAP_SYS_RESOURCE (a container that drops it) root's write does not become the
      // floor: the job may go back down, but never below the worker's.
      const now = Number(/^(?:kept|lowered) (-?\d+)$/m.exec(log)?.[1]);
      expect(now).toBeGreaterThanOrEqual(worker);
    }
    await backend.releaseRun(run.runId, run.submission);
  });
});
