import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import type { SubmitRequest } from '../../src/client/troupe-client';
import { LocalBackend } from '../../src/backends/local/local-backend';
import { lookupUser, runUserName } from '../../src/backends/local/run-user';
import { JobLayout } from '../../src/runner/job-layout';
import type { RunState } from '../../src/contract/run-state';
import { stopRunsLeftGoing, useLocalTroupe } from '../helpers/local-troupe';
import { deriveRunSshKeys } from '../../src/secrets/run-ssh-keys';
import { loadSecretKey } from '../../src/secrets/sealed-env';
import { loadCodecKeyring } from '../../src/codec/codec-keys';
import { EncryptionCodec } from '../../src/codec/payload-codec';
import { historiesText } from '../helpers/history-text';
import { nodeGroupWorkflowId, runWorkflowId } from '../../src/contract/ids';
import { expectNothingLeft, jobDirsOf, privateKeysUnder, sshServersUnder, twoNodeTask } from '../helpers/inter-node-ssh';

/**
 * Inter-node SSH on the local fleet (netns mode, as root): Open MPI's `mpirun` across a launcher
 * group and two worker groups with the unchanged dstack command line, and the negative cases.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const stateDir = mkdtempSync(join(tmpdir(), 'troupe-mpi-'));
// Two fake GPUs per node: the workers' hostfile lines get `slots=2`, the launcher's none.
const backend = new LocalBackend({ stateDir, network: 'netns', gpus: 2 });
const env = useLocalTroupe({ stateDir, backend, remove: () => rmSync(stateDir, { recursive: true, force: true }) });
const started: string[] = [];

// Before the worker stops (hooks run in reverse): a run a failed test left going is torn down, not leaked.
afterAll(async () => {
  await stopRunsLeftGoing(env.troupe, started);
});

function submit(request: SubmitRequest & { runName: string }) {
  started.push(request.runName);
  return env.troupe.submit(request);
}

async function logOf(name: string, jobNum: number): Promise<string> {
  return (await env.troupe.run(name).readLog(jobNum)).data;
}

async function waitRunning(name: string): Promise<RunState> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const state = await env.troupe.run(name).state();
    if (state.jobs.every((j) => j.status === 'RUNNING')) return state;
    if (Date.now() > deadline || ['FAILED', 'DONE', 'TERMINATED'].includes(state.status)) throw new Error(`${name} is ${state.status}, not running`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('inter-node SSH on the local fleet', () => {
  it('mpirun --hostfile $DSTACK_MPI_HOSTFILE across a launcher and two worker groups: every rank sums right, placed per the hostfile', async () => {
    expect(await backend.networkMode()).toBe('netns');
    const name = `mpi-${env.worker.taskQueue.slice(-8)}`;
    const handle = await submit({ file: join(root, 'examples/mpi-allreduce-local.yml'), runName: name });
    const state = await handle.wait();
    const log = await logOf(name, 0);
    expect(state.status, log).toBe('DONE');
    expect(state.termination_reason).toBe('ALL_JOBS_DONE');
    const ips = state.jobs.map((j) => j.instance?.internal_ip);
    // The hostfile as Troupe wrote it: the launcher bare, each worker with its two GPUs as slots.
    expect(log).toContain(`${ips[0]}\n${ips[1]} slots=2\n${ips[2]} slots=2\n${ips[3]} slots=2\n`);
    const ranks = log
      .split('\n')
      .filter((l) => l.startsWith('rank '))
      .map((l) => l.match(/^rank (\d+)\/(\d+) on node (\d+) \(([\w-]+)\): sum (\d+)$/))
      .map((m) => ({ rank: Number(m?.[1]), size: Number(m?.[2]), node: Number(m?.[3]), group: m?.[4], sum: Number(m?.[5]) }))
      .sort((x, y) => x.rank - y.rank);
    // Every slot filled, in hostfile order: the launcher's (one per CPU), then 2 per worker node.
    const launcherSlots = ranks.filter((r) => r.node === 0).length;
    expect(launcherSlots).toBeGreaterThanOrEqual(1);
    const size = launcherSlots + 6;
    const groups = ['launcher', 'workers-a', 'workers-a', 'workers-b'];
    const nodeOf = [...Array<number>(launcherSlots).fill(0), 1, 1, 2, 2, 3, 3];
    expect(ranks).toEqual(nodeOf.map((node, rank) => ({ rank, size, node, group: groups[node], sum: (size * (size + 1)) / 2 })));
    // The workers ran `sleep infinity` until the launcher was done, then were stopped.
    for (const job of state.jobs.slice(1)) expect(job.termination_reason).toBe('TERMINATED_BY_SERVER');
    await expectNothingLeft(state);
    // The keys were made by the activity on the node's way: no history of the run or its groups holds one.
    const clientKey = deriveRunSshKeys(loadSecretKey({ create: false }), state.run_uid, 0).client;
    expect(privateKeysUnder(stateDir)).toEqual([]);
    // Read decrypted (payloads are stored encrypted by the codec): what a key holder would see.
    const codec = new EncryptionCodec(loadCodecKeyring({ create: false }), { unencrypted: 'pass' });
    for (const id of [runWorkflowId(name), ...['launcher', 'workers-a', 'workers-b'].map((g) => nodeGroupWorkflowId(runWorkflowId(name), g, 0))]) {
      const { text: history } = await historiesText(env.client, id, codec);
      expect(history.length).toBeGreaterThan(1000);
      expect(history).toContain(name);
      expect(history).not.toContain('PRIVATE KEY');
      expect(history).not.toContain(clientKey.publicKey.split(' ')[1]);
    }
  });

  it("a node of another run cannot log in to this run's nodes; its own peers it can; a stopped run's servers are gone", async () => {
    const a = `ssh-a-${env.worker.taskQueue.slice(-8)}`;
    await submit({ yaml: twoNodeTask(a, ['sleep infinity']), runName: a });
    const running = await waitRunning(a);
    const aIps = running.jobs.map((j) => j.instance?.internal_ip ?? '');
    const aDirs = jobDirsOf(running);
    expect(sshServersUnder(aDirs)).toHaveLength(2);

    const b = `ssh-b-${env.worker.taskQueue.slice(-8)}`;
    const aUser = runUserName(running.run_uid, 0);
    const anyHostKey = '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5';
    const probe = [
      // Into run A, as B's user and as A's: the firewall lets no packet of run B reach run A's nodes.
      `ssh ${anyHostKey} "$OTHER_IP" true 2>&1 | tail -n 1; echo "as-own-user=\${PIPESTATUS[0]}"`,
      `ssh ${anyHostKey} "$OTHER_USER@$OTHER_IP" true 2>&1 | tail -n 1; echo "as-their-user=\${PIPESTATUS[0]}"`,
      // With the run's own client config: the same wall.
      'ssh -o ConnectTimeout=5 "$OTHER_IP" true 2>&1 | tail -n 1; echo "strict=${PIPESTATUS[0]}"',
      // Its own peer, by address, with no flags: in the peer's environment, as the run's user.
      'ssh "$(sed -n 2p <<< "$DSTACK_NODES_IPS")" \'echo "peer-rank=$DSTACK_NODE_RANK peer-group=$DSTACK_NODE_GROUP_NAME peer-user=$(id -un)"\'',
    ];
    const taskB = twoNodeTask(b, probe, [`OTHER_IP=${aIps[1]}`, `OTHER_USER=${aUser}`]);
    const stateB = await (await submit({ yaml: taskB, runName: b })).wait();
    const logB = await logOf(b, 0);
    expect(stateB.status, logB).toBe('DONE');
    expect(logB).toMatch(/port 22: Connection timed out\r?\nas-own-user=255\r?\n/);
    expect(logB).toMatch(/port 22: Connection timed out\r?\nas-their-user=255\r?\n/);
    expect(logB).toMatch(/port 22: Connection timed out\r?\nstrict=255\r?\n/);
    expect(logB).toContain(`peer-rank=1 peer-group=peer peer-user=${runUserName(stateB.run_uid, 0)}`);
    await expectNothingLeft(stateB);

    // Run A's servers stayed up meanwhile; stopping the run ends them and removes their files.
    expect(sshServersUnder(aDirs)).toHaveLength(2);
    await env.troupe.run(a).stop();
    const stoppedA = await env.troupe.run(a).wait();
    expect(stoppedA.status).toBe('TERMINATED');
    await expectNothingLeft(stoppedA);
    expect(await lookupUser(runUserName(stoppedA.run_uid, 0))).toBeNull();
    for (const dir of aDirs) expect(existsSync(join(dir, JobLayout.log))).toBe(true);
    for (const dir of aDirs) expect(readdirSync(dir).sort()).toEqual([JobLayout.exitCode, JobLayout.log, JobLayout.started].sort());
  });
});
