import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { JobRef } from '../../src/backends/backend';
import type { LocalBackend } from '../../src/backends/local/local-backend';
import { runWorkflowId } from '../../src/contract/ids';
import type { RunState } from '../../src/contract/run-state';
import { jobVisibleTempDir } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { testClient } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';
import { groupRequest, jobRef, LocalFleetHarness, makeRun, runJobFiles, waitFor, type TestRun } from './local-fixtures';

/**
 * Issue 29, finding 1: a node replaced (a restart, a resize down) has its directory cleaned up by
 * the root worker while the other jobs of its run (the same user) run on. Here the node being
 * replaced hands a descriptor of its `work/` to a sibling job of its run, which keeps swapping
 * directories inside it for symlinks to a root-owned canary directory elsewhere on the machine,
 * while the worker gives the node back; then the next attempt of the node does the same, many
 * times over: through the backend's releaseJob (what a restart and a resize down call), and
 * through a run whose node fails and is replaced by restart-node. Root must never delete (or
 * touch) anything of the canary.
 */

const root = process.getuid?.() === 0;
const h = new LocalFleetHarness();
// Open to the run's user: the sibling listens here, the scripts live here.
// Under /var/tmp: an isolated node has a /tmp of its own.
const shared = jobVisibleTempDir('troupe-race-shared-');
chmodSync(shared, 0o1777);
// Root's, outside the fleet: what a winning race would delete.
const canary = mkdtempSync(join('/var/tmp', 'troupe-race-canary-'));
const CANARY_FILES = 200;
const REPLACEMENTS = 12;
const RESTARTS = 8;

afterAll(async () => {
  await h.cleanup();
  rmSync(shared, { recursive: true, force: true });
  rmSync(canary, { recursive: true, force: true });
});

/** The sibling: for every descriptor it receives, swaps `d<n>` between a full directory and a symlink to the canary. */
const SWAPPER = `
import os, socket, sys, threading, time
shared, target = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(os.path.join(shared, 'sock'))
srv.listen(64)
received = 0
def swap(fd, n):
    real, alias = 'h%d' % n, 'd%d' % n
    try:
        os.mkdir(real, dir_fd=fd)
        for j in range(40):
            os.close(os.open('%s/f%d' % (real, j), os.O_CREAT | os.O_WRONLY, dir_fd=fd))
        while True:
            os.rename(real, alias, src_dir_fd=fd, dst_dir_fd=fd)
            time.sleep(0.0005)
            os.rename(alias, real, src_dir_fd=fd, dst_dir_fd=fd)
            os.symlink(target, alias, dir_fd=fd)
            time.sleep(0.002)
            os.unlink(alias, dir_fd=fd)
    except OSError:
        return
while True:
    conn, _ = srv.accept()
    _, fds, _, _ = socket.recv_fds(conn, 16, 1)
    for fd in fds:
        for n in range(6):
            threading.Thread(target=swap, args=(fd, n), daemon=True).start()
    received += 1
    with open(os.path.join(shared, 'received.tmp'), 'w') as f:
        f.write(str(received))
    os.rename(os.path.join(shared, 'received.tmp'), os.path.join(shared, 'received'))
    conn.close()
`;

/** The node being replaced: sends a descriptor of its work/ (its working directory) to the sibling, then runs on (or fails after argv[2] seconds). */
const SENDER = `
import os, socket, sys, time
fd = os.open('.', os.O_RDONLY | os.O_DIRECTORY)
for _ in range(200):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(sys.argv[1], 'sock'))
        break
    except OSError:
        time.sleep(0.05)
socket.send_fds(s, [b'x'], [fd])
s.close()
print('sent', flush=True)
if len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
    sys.exit(3)
while True:
    time.sleep(1)
`;

/** How many descriptors the sibling listening in `dir` has taken. */
function received(dir = shared): number {
  try {
    return Number(readFileSync(join(dir, 'received'), 'utf8'));
  } catch {
    return 0;
  }
}

async function startAttempt(backend: LocalBackend, run: TestRun, jobNum: number, k: number, ips: string[]): Promise<JobRef> {
  const job = run.jobs[jobNum]!;
  const [instance] = await backend.provision(groupRequest(run, job.node_group_index, [{ ...job, attempt: k }]));
  h.track(run, [instance!]);
  const ref: JobRef = { ...jobRef(run, jobNum, instance!), attempt: k };
  const addresses = [...ips];
  addresses[jobNum] = instance!.internal_ip;
  await backend.startJob(ref, runJobFiles(run, jobNum, addresses, backend.jobDirectory(ref)));
  return ref;
}

function fillCanary(): void {
  for (let i = 0; i < CANARY_FILES; i += 1) writeFileSync(join(canary, `c${i}`), 'canary\n');
  mkdirSync(join(canary, 'sub'), { recursive: true });
  writeFileSync(join(canary, 'sub', 'deep'), 'canary\n');
  writeFileSync(join(shared, 'swapper.py'), SWAPPER);
  writeFileSync(join(shared, 'sender.py'), SENDER);
}

function expectCanaryIntact(): void {
  expect(readdirSync(canary).length, 'files left in the canary directory').toBe(CANARY_FILES + 1);
  expect(readdirSync(join(canary, 'sub'))).toEqual(['deep']);
}

describe.skipIf(!root)('releasing a node while a sibling of its run races the clean-up (as root, isolated)', () => {
  it(`never deletes outside the job directory over ${REPLACEMENTS} replacements`, async () => {
    fillCanary();

    const backend = h.backend({ network: 'loopback', subnet: '127.213.246.0/24', releaseGraceSeconds: 1 });
    const run = makeRun([
      { name: 'sibling', nodes: 1, commands: [`exec /usr/bin/python3 ${shared}/swapper.py ${shared} ${canary}`] },
      { name: 'replaced', nodes: 1, commands: [`exec /usr/bin/python3 ${shared}/sender.py ${shared}`] },
    ]);
    const instances = await h.provision(backend, run);
    const ips = instances.map((i) => i.internal_ip);
    await h.start(backend, run, instances, [0]);

    const failures: string[] = [];
    let ref: JobRef = jobRef(run, 1, instances[1]!);
    await backend.startJob(ref, runJobFiles(run, 1, ips, backend.jobDirectory(ref)));
    for (let k = 0; k < REPLACEMENTS; k += 1) {
      await waitFor(`the sibling to hold attempt ${k}'s work/`, async () => received() >= k + 1, 30_000);
      // Let the swapping run, then give the node back as a restart or resize down does.
      await new Promise((r) => setTimeout(r, 150));
      await backend.releaseJob(ref, 1).catch((err: unknown) => failures.push(String(err)));
      const left = readdirSync(canary).length;
      if (left !== CANARY_FILES + 1) break;
      ref = await startAttempt(backend, run, 1, k + 1, ips);
    }

    expectCanaryIntact();
    expect(failures).toEqual([]);
    await backend.releaseRun(run.runId, run.submission);
  }, 240_000);

  it(`the same through a run: restart-node replaces the node ${RESTARTS} times while its sibling races`, async () => {
    fillCanary();
    const dir = mkdtempSync(join(shared, 'wf-'));
    chmodSync(dir, 0o1777);
    const fleet = h.backend({ network: 'loopback', subnet: '127.213.247.0/24', releaseGraceSeconds: 1 });
    const worker = await startTroupeWorker({ local: fleet });
    const { client, close } = await testClient();
    try {
      const name = `race-${worker.taskQueue}`;
      const plan = makePlan(name, [
        { name: 'sibling', nodes: 1, commands: [`exec /usr/bin/python3 ${shared}/swapper.py ${dir} ${canary}`] },
        // Each attempt hands its work/ over, lets the swapping run, then fails: replaced at its rank.
        { name: 'replaced', nodes: 1, commands: [`exec /usr/bin/python3 ${shared}/sender.py ${dir} 0.3`] },
      ]);
      Object.assign(plan.groups[1]!, { on_failure: { action: 'restart-node', max_restarts: RESTARTS, within_s: null } });
      const handle = await client.workflow.start('RunWorkflow', {
        taskQueue: worker.taskQueue,
        workflowId: runWorkflowId(name),
        args: [{ plan, backend: 'local', options: { stop_grace_s: 1 } }],
      });
      const end = (await handle.result()) as RunState;
      // One more failure than the budget fails the run: every attempt was replaced and given back.
      expect(end.status).toBe('FAILED');
      expect(end.groups[1]?.restarts).toBe(RESTARTS);
      expect(received(dir)).toBe(RESTARTS + 1);
      expectCanaryIntact();
    } finally {
      await worker.stop();
      await close();
    }
  }, 300_000);
});
