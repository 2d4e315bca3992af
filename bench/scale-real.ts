/**
 * Real nodes on the local fleet (loopback addresses, or network namespaces in the `netns` cases;
 * isolation as the machine allows: on as root),
 * each a `sleep infinity` in 3 groups, beside two floors: a shell script that starts the same
 * number of `sleep`s and kills them, plain (a session each) and isolated as Troupe isolates a node
 * (`unshare` of mount, pid, UTS and IPC namespaces, a private /tmp, /dev/shm and /proc, `setpriv` to
 * an unprivileged user). Per case: submit → last node provisioned → all RUNNING, stop → torn down
 * (the run closed), the worker's CPU seconds and peak RSS, its peak open descriptors (sampled every
 * 50 ms), holding cost (worker CPU per running job per second, over 10 s), the histories of the run
 * and its groups (events and bytes), and what was left on the machine after the run (processes,
 * leases, instance records, the run's user). The load average is printed beside every figure.
 *
 *   npx tsx bench/scale-real.ts                     every case: 100, 300, 1000, 4096, 1000:nofile, 1000:kill, 1000:netns
 *   npx tsx bench/scale-real.ts 1000 1000:kill      chosen cases
 *
 * `N:nofile`: the worker under `ulimit -n 1024`. `N:kill`: the worker is killed (kill -9) in the
 * middle of the teardown (jobs that ignore SIGTERM, so the teardown waits out their grace) and a
 * new one finishes it; "torn down" then counts from the stop to the run's close across both.
 * `N:netns`: the fleet with a network namespace per node (what a root worker gets by default),
 * beside its own floors, run in the same bench run (netnsFloor): per node, the namespace, a veth
 * pair on one bridge, the address, MAC, loopback and route set, then the isolated floor's node in
 * the namespace; one `ip` process per step ("serial"), or the root namespace's steps for all nodes
 * in one `ip -batch` and each namespace's in one `ip -n NS -batch` ("batched").
 * Prints figures. Asserts nothing.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { withAllJobs } from '../src/client/run-jobs';
import { runUserName } from '../src/backends/local/run-user';
import { nodeGroupWorkflowId, runWorkflowId } from '../src/contract/ids';
import { runJobsQuery, runStateQuery, stopRunSignal } from '../src/contract/messages';
import type { RunState } from '../src/contract/run-state';
import { leftovers } from '../test/helpers/leftovers';
import { cpuSeconds, loadAverage } from './harness/cpu';
import { workflowCost } from './harness/history';
import { spreadPlan } from './harness/plans';
import { bytes, fmt } from './harness/stats';
import { startBenchTemporal } from './harness/temporal-env';
import { startWorkerProcess, type WorkerProcess } from './harness/worker-process';
import type { WorkerConfig } from './harness/worker-config';

interface Case {
  nodes: number;
  variant: 'plain' | 'nofile' | 'kill' | 'netns';
}
const FILE_LIMIT = 1024;
/** The `kill` case's grace: the worker is killed this far into it. */
const KILL_GRACE_S = 4;
const KILL_AFTER_MS = 1_500;

function parseCase(arg: string): Case {
  const [n, variant = 'plain'] = arg.split(':');
  const nodes = Number(n);
  if (!Number.isInteger(nodes) || nodes < 3 || !['plain', 'nofile', 'kill', 'netns'].includes(variant)) throw new Error(`bench/scale-real.ts: "${arg}" is not N, N:nofile, N:kill or N:netns (N ≥ 3)`);
  return { nodes, variant: variant as Case['variant'] };
}
const args = process.argv.slice(2);
const CASES = (args.length > 0 ? args : ['100', '300', '1000', '4096', '1000:nofile', '1000:kill', '1000:netns']).map(parseCase);

function openFiles(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return 0;
  }
}

/**
 * The floor: `n` sleeps started by one bash, plain or isolated, until all are there; then killed,
 * until none is. Isolated, bash stays the namespace's init as isolate.sh does, and `--kill-child`
 * ends the namespace with its `unshare`.
 */
function floorNode(tag: string, isolated: boolean, sshd = ''): string {
  return isolated
    ? `setsid unshare --mount --pid --uts --ipc --fork --kill-child bash --noprofile --norc -c "${sshd}mount -t tmpfs -o size=64k none /tmp && mount -t tmpfs none /dev/shm && mount -t proc proc /proc && setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs bash --noprofile --norc -c 'exec -a ${tag} sleep infinity'; exit"`
    : `setsid bash --noprofile --norc -c 'exec -a ${tag} sleep infinity'`;
}

function floor(n: number, isolated: boolean): { startMs: number; stopMs: number } {
  const tag = `troupe-floor-${process.pid}`;
  const node = floorNode(tag, isolated);
  const script = [
    `t0=$(date +%s%N); for ((i = 0; i < ${n}; i++)); do ${node} < /dev/null > /dev/null 2>&1 & pids+=($!); done`,
    `until [ "$(pgrep -c -f '^${tag}')" -ge ${n} ]; do sleep 0.02; done; t1=$(date +%s%N)`,
    `kill -KILL "\${pids[@]}" 2>/dev/null; wait 2>/dev/null; until [ "$(pgrep -c -f '^${tag}')" -eq 0 ]; do sleep 0.02; done; t2=$(date +%s%N)`,
    'echo $(((t1 - t0) / 1000000)) $(((t2 - t1) / 1000000))',
  ].join('\n');
  const [startMs, stopMs] = execFileSync('bash', ['--noprofile', '--norc', '-c', script], { encoding: 'utf8' }).trim().split(' ').map(Number);
  return { startMs: startMs ?? Number.NaN, stopMs: stopMs ?? Number.NaN };
}

/**
 * The namespace mode's floor: per node what the local fleet's netns.ts makes (a namespace, a veth
 * pair with one end in it and the other on a bridge, the node end's MAC, address, link and
 * loopback up, an on-link default route), then the isolated floor's node entered by `ip netns
 * exec`, until all `sleep`s are there; then killed and every namespace deleted. Serial: one `ip`
 * process per step, one node after the other. Batched: the root namespace's steps of all nodes in
 * one `ip -batch`, then one `ip -n NS -batch` per node. Its own bridge and names (a tag of this
 * process), so it never meets a fleet's; cleaned up whatever happens. With `ssh` (batched), the fair
 * floor of what a Troupe node of a multi-node group is: each node also starts an OpenSSH server on
 * its address (inter-node SSH, which the fleet starts for every such node) and counts only once that
 * server has written its pid file (listens), as a Troupe job is RUNNING only then.
 */
function netnsFloor(n: number, batched: boolean, ssh = false): { startMs: number; stopMs: number } {
  const tag = `troupe-nsfloor-${process.pid}`;
  const short = (process.pid % 0xfff).toString(16);
  const bridge = `tfb${short}`;
  const ns = (i: number) => `tfns-${short}-${i}`;
  const host = (i: number) => `tf${short}h${i}`;
  const peer = (i: number) => `tf${short}n${i}`;
  const addr = (i: number) => `10.215.${(i + 2) >> 8}.${(i + 2) & 255}`;
  const mac = (i: number) => `02:55:0a:d7:${(((i + 2) >> 8) & 255).toString(16).padStart(2, '0')}:${((i + 2) & 255).toString(16).padStart(2, '0')}`;
  const outside = (i: number) => [`netns add ${ns(i)}`, `link add ${host(i)} type veth peer name ${peer(i)} netns ${ns(i)}`, `link set ${host(i)} master ${bridge} up`];
  const inside = (i: number) => [
    `link set ${peer(i)} address ${mac(i)}`,
    `addr add ${addr(i)}/16 dev ${peer(i)}`,
    `link set ${peer(i)} up`,
    'link set lo up',
    `route replace default dev ${peer(i)} src ${addr(i)}`,
  ];
  // The SSH servers' files in a folder the nodes' own /tmp does not hide; each server's address and pid file its node's.
  const sshDir = ssh ? mkdtempSync('/var/tmp/troupe-bench-floor-sshd-') : null;
  const sshd = (i: number) =>
    sshDir ? `/usr/sbin/sshd -D -e -f ${sshDir}/sshd_config -o ListenAddress=${addr(i)} -o PidFile=${sshDir}/pids/${i} < /dev/null > /dev/null 2>&1 & ` : '';
  const nodeOf = (i: number) => floorNode(tag, true, sshd(i));
  const all = Array.from({ length: n }, (_, i) => i);
  const setUp = batched
    ? [
        `ip -batch - <<'OUT'`,
        ...all.flatMap(outside),
        'OUT',
        ...all.flatMap((i) => [`ip -n ${ns(i)} -batch - <<'IN'`, ...inside(i), 'IN', `ip netns exec ${ns(i)} ${nodeOf(i)} < /dev/null > /dev/null 2>&1 & pids+=($!); echo $! >> "$PIDS"`]),
      ]
    : all.map((i) => [...outside(i).map((c) => `ip ${c}`), ...inside(i).map((c) => `ip -n ${ns(i)} ${c}`), `ip netns exec ${ns(i)} ${nodeOf(i)} < /dev/null > /dev/null 2>&1 & pids+=($!); echo $! >> "$PIDS"`].join('; '));
  const tearDown = batched ? [`ip -batch - <<'DEL'`, ...all.map((i) => `netns del ${ns(i)}`), 'DEL'] : all.map((i) => `ip netns del ${ns(i)}`);
  if (sshDir) {
    mkdirSync(join(sshDir, 'pids'));
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(sshDir, 'host_key')]);
    writeFileSync(join(sshDir, 'sshd_config'), [`HostKey ${sshDir}/host_key`, 'UsePAM no', 'StrictModes no', 'PasswordAuthentication no', ''].join('\n'));
  }
  const script = [
    ...(sshDir ? ['mkdir -p /run/sshd'] : []),
    `ip link add ${bridge} type bridge && ip link set ${bridge} up || exit 1`,
    't0=$(date +%s%N)',
    ...setUp,
    `until [ "$(pgrep -c -f '^${tag}')" -ge ${n} ]; do sleep 0.02; done`,
    ...(sshDir ? [`until [ "$(ls ${sshDir}/pids | wc -l)" -ge ${n} ]; do sleep 0.02; done`] : []),
    't1=$(date +%s%N)',
    // The servers leave with their namespaces' init (--kill-child kills the pid namespace).
    'kill -KILL "${pids[@]}" 2>/dev/null; wait 2>/dev/null',
    ...tearDown,
    `until [ "$(pgrep -c -f '^${tag}')" -eq 0 ]; do sleep 0.02; done; t2=$(date +%s%N)`,
    `ip link del ${bridge}`,
    'echo $(((t1 - t0) / 1000000)) $(((t2 - t1) / 1000000))',
  ].join('\n');
  const dir = mkdtempSync(join(tmpdir(), 'troupe-bench-netns-floor-'));
  try {
    const file = join(dir, 'floor.sh');
    writeFileSync(file, script);
    const out = execFileSync('bash', ['--noprofile', '--norc', file], { encoding: 'utf8', env: { ...process.env, PIDS: join(dir, 'pids') } }).trim().split('\n').at(-1) ?? '';
    const [startMs, stopMs] = out.split(' ').map(Number);
    return { startMs: startMs ?? Number.NaN, stopMs: stopMs ?? Number.NaN };
  } finally {
    // Whatever failed: no sleep, namespace or bridge of the floor stays.
    execFileSync('bash', ['--noprofile', '--norc', '-c', `[ -f ${dir}/pids ] && xargs -r kill -KILL < ${dir}/pids 2>/dev/null; for f in /run/netns/tfns-${short}-*; do [ -e "$f" ] && ip netns del "\${f##*/}"; done; ip link del ${bridge} 2>/dev/null; true`]);
    rmSync(dir, { recursive: true, force: true });
    if (sshDir) rmSync(sshDir, { recursive: true, force: true });
  }
}

function hasRunUser(runUid: string): boolean {
  const user = runUserName(runUid, 0);
  return readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .some((line) => line.startsWith(`${user}:`));
}

const at = (ms: number) => `${fmt(ms / 1000, 1)} s`;
const withLoad = (text: string, load: number) => `${text} (${fmt(load, 1)})`;

const env = await startBenchTemporal('scale-real');
const rows: string[][] = [];
try {
  for (const c of CASES) {
    const { nodes: n } = c;
    const stateDir = mkdtempSync(join(tmpdir(), 'troupe-bench-scale-real-'));
    const taskQueue = `scale-real-${n}-${Date.now()}`;
    const config: WorkerConfig = {
      address: env.address,
      task_queue: taskQueue,
      bundle_path: env.bundlePath,
      // Past the default /22 (1,022 nodes): a /18 of loopback addresses.
      backend: {
        kind: 'local',
        state_dir: stateDir,
        network: c.variant === 'netns' ? 'netns' : 'loopback',
        ...(n > 1022 ? { subnet: c.variant === 'netns' ? '10.213.192.0/18' : '127.216.0.0/18' } : {}),
      },
    };
    const workerOpts = c.variant === 'nofile' || c.variant === 'kill' ? { fileLimit: FILE_LIMIT } : {};
    let worker: WorkerProcess = await startWorkerProcess(config, workerOpts);
    const workers = [worker];
    let peakFds = 0;
    const sampler = setInterval(() => {
      peakFds = Math.max(peakFds, openFiles(worker.pid));
    }, 50);
    try {
      const runName = `scale-real-${n}-${c.variant}`;
      const commands = c.variant === 'kill' ? ["trap '' TERM; while :; do sleep 1; done"] : ['sleep infinity'];
      const cpu0 = cpuSeconds(worker.pid);
      const load0 = loadAverage();
      const submitted = Date.now();
      const handle = await env.client.workflow.start('RunWorkflow', {
        taskQueue,
        workflowId: runWorkflowId(runName),
        args: [{ plan: spreadPlan(runName, n, 3, commands), backend: 'local', options: { stop_grace_s: c.variant === 'kill' ? KILL_GRACE_S : 1 } }],
      });
      const allJobs = async () => await withAllJobs(await handle.query(runStateQuery), (offset, limit) => handle.query(runJobsQuery, { offset, limit }));
      let state: RunState;
      for (;;) {
        state = await allJobs();
        if (state.jobs.length === n && state.jobs.every((j) => j.status === 'RUNNING')) break;
        if (['FAILED', 'TERMINATED', 'DONE'].includes(state.status)) throw new Error(`${n} nodes: the run ended ${state.status}: ${state.message ?? ''}`);
        await sleep(250);
      }
      const running = Date.now() - submitted;
      const provisioned = Math.max(...state.jobs.map((j) => Date.parse(j.provisioned_at ?? ''))) - submitted;
      const cpuRunning = cpuSeconds(worker.pid) - cpu0;
      const loadRunning = loadAverage();
      // Holding the jobs: worker CPU per job per second over 10 s.
      const cpuHold0 = cpuSeconds(worker.pid);
      await sleep(10_000);
      const holdMsPerJobSecond = ((cpuSeconds(worker.pid) - cpuHold0) * 1000) / n / 10;
      const loadHold = loadAverage();
      const stopping = Date.now();
      await handle.signal(stopRunSignal, { abort: false });
      if (c.variant === 'kill') {
        await sleep(KILL_AFTER_MS);
        await worker.kill9();
        worker = await startWorkerProcess(config, workerOpts);
        workers.push(worker);
      }
      await handle.result();
      const down = Date.now() - stopping;
      const loadDown = loadAverage();
      const final = await allJobs();
      const left = leftovers(final, stateDir);
      const runId = runWorkflowId(runName);
      const costs = await Promise.all([runId, ...['g0', 'g1', 'g2'].map((g) => nodeGroupWorkflowId(runId, g, 0))].map((id) => workflowCost(env.client, id).catch(() => null)));
      const [run, ...groups] = costs;
      const groupEvents = groups.reduce((sum, g) => sum + (g?.events ?? 0), 0);
      const groupBytes = groups.reduce((sum, g) => sum + (g?.bytes ?? 0), 0);
      const plainFloor = floor(n, false);
      const isolatedFloor = floor(n, true);
      const nsFloors = c.variant === 'netns' ? [netnsFloor(n, false), netnsFloor(n, true), netnsFloor(n, true, true)] : null;
      rows.push([
        `${n}${{ plain: '', nofile: `, ulimit -n ${FILE_LIMIT}`, kill: ', worker killed mid-teardown', netns: ', network namespaces' }[c.variant]}`,
        withLoad(`${at(provisioned)} / ${at(running)}`, loadRunning),
        withLoad(at(down), loadDown),
        `${at(plainFloor.startMs)} / ${at(plainFloor.stopMs)}`,
        `${at(isolatedFloor.startMs)} / ${at(isolatedFloor.stopMs)}`,
        nsFloors ? nsFloors.map((f) => `${at(f.startMs)} / ${at(f.stopMs)}`).join('; ') : '—',
        `${fmt(cpuRunning, 1)} s`,
        withLoad(`${fmt(holdMsPerJobSecond, 3)}`, loadHold),
        `${fmt(Math.max(...workers.map((w) => w.peakRssMiB()).filter(Number.isFinite)))} MiB`,
        String(peakFds),
        `${run?.events ?? '?'} / ${bytes(run?.bytes ?? 0)}; groups ${groupEvents} / ${bytes(groupBytes)}`,
        `${final.status}; left: ${left.processes} processes, ${left.leases} leases, ${left.instances} instances, run user ${hasRunUser(final.run_uid) ? 'KEPT' : 'removed'}`,
      ]);
      console.log(`(load average at submit ${fmt(load0, 1)}) ${rows.at(-1)?.join('  ')}`);
    } finally {
      clearInterval(sampler);
      for (const w of workers) await w.stop();
      rmSync(stateDir, { recursive: true, force: true });
    }
  }
} finally {
  await env.close();
}
const header = [
  'nodes',
  'submit → provisioned / all RUNNING (load)',
  'stop → torn down (load)',
  'floor plain: start / kill',
  'floor isolated: start / kill',
  'floor netns, serial; batched; batched + sshd: start / torn down',
  'worker CPU to RUNNING',
  'holding: worker CPU ms/job/s (load)',
  'worker peak RSS',
  'worker peak fds',
  'history events / bytes: run; groups',
  'end',
];
console.log(`\nLocal fleet, loopback (netns where the case says), real processes (isolation ${process.getuid?.() === 0 ? 'on' : 'off'}), ${new Date().toISOString()}:`);
console.log(`| ${header.join(' | ')} |\n|${header.map(() => '---').join('|')}|`);
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
