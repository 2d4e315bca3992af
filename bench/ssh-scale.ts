/**
 * An SSH fleet at the scale of a small cluster: 64 real sshd hosts in network namespaces on this
 * machine (8 CPU-only, 28 with a fake L40S, 28 with a fake A10G; root's .bashrc skipped unless
 * BENCH_BASHRC=1), a run of 64 nodes in 3 groups, beside the floor (64 parallel `ssh` sessions
 * starting the same command). Then, with the 64 jobs running for BENCH_HOLD_S seconds (60), what
 * watching them costs: the worker's CPU and memory, the hosts' CPU (every process in their
 * namespaces, sshd and Troupe's shells included), and the commands Troupe sent to the hosts.
 *
 *   npx tsx bench/ssh-scale.ts          (as root: network namespaces; BENCH_END_EVENTS=1 prints where each run's end goes)
 *
 * Prints figures; writes bench/results/ssh-scale.{json,png}. Asserts nothing.
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { closeAllSshSessions, connectSsh, HostKeyTrust } from '../src/backends/ssh';
import { SshBackend } from '../src/fleet/ssh-backend';
import type { Client } from '@temporalio/client';
import { TroupeClient } from '../src/client';
import { runWorkflowId } from '../src/contract/ids';
import { workflowCost } from './harness/history';
import { FleetClient } from '../src/fleet/fleet-client';
import { fleetSpecOf } from '../src/fleet/fleet-spec';
import { loadFleetConfig } from '../src/plan';
import { createTestHosts, jobDirOfTestHost, testHostsFleetYaml, type TestHosts } from '../test/e2e/hosts';
import { run as runCommand } from '../test/e2e/hosts/command';
import { cpuSeconds, loadAverage } from './harness/cpu';
import { resultsDir } from './harness/results';
import { plotSshScale, SshScaleResultsSchema } from './ssh-scale-plot';
import { fmt, median } from './harness/stats';
import { startBenchTemporal, startInProcessWorker } from './harness/temporal-env';

const HOLD_S = Number(process.env.BENCH_HOLD_S ?? 60);
const ROUNDS = Number(process.env.BENCH_RUNS ?? 3);
const bashrc = process.env.BENCH_BASHRC === '1';
const L40S = { name: 'NVIDIA L40S', memoryMiB: 46068, count: 1 };
const A10G = { name: 'NVIDIA A10G', memoryMiB: 23028, count: 1 };
const names = [...Array.from({ length: 8 }, (_, i) => `cpu-${i}`), ...Array.from({ length: 28 }, (_, i) => `l40s-${i}`), ...Array.from({ length: 28 }, (_, i) => `a10g-${i}`)];

function task(run: string, work: string): string {
  const group = (name: string, nodes: number, resources: string) => [`  - name: ${name}`, `    nodes: ${nodes}`, `    commands: ['${work}']`, `    resources: ${resources}`];
  return ['type: task', `name: ${run}`, 'groups:', ...group('head', 8, '{cpu: 1.., disk: 1GB..}'), ...group('prefill', 28, '{gpu: L40S, disk: 1GB..}'), ...group('decode', 28, '{gpu: A10G, disk: 1GB..}'), ''].join('\n');
}

/** 64 new ssh sessions at once, each starting `sleep 1`: running when each has printed its first line. */
async function floor(hosts: TestHosts): Promise<{ allRunning: number; end: number }> {
  const t0 = performance.now();
  const sessions = names.map((name) => {
    const child = spawn(
      'ssh',
      ['-i', hosts.clientKeyPath, '-o', `UserKnownHostsFile=${hosts.knownHostsFile}`, '-o', 'StrictHostKeyChecking=yes', '-o', 'BatchMode=yes', `root@${hosts.host(name).address}`, 'echo started; sleep 1'],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    const started = new Promise<number>((resolve) => child.stdout.once('data', () => resolve(performance.now())));
    child.stdout.resume();
    const exited = new Promise<number>((resolve) => child.once('exit', () => resolve(performance.now())));
    return { started, exited };
  });
  const allRunning = Math.max(...(await Promise.all(sessions.map((s) => s.started)))) - t0;
  const end = Math.max(...(await Promise.all(sessions.map((s) => s.exited)))) - t0;
  return { allRunning, end };
}

/** CPU seconds of every process in the hosts' namespaces (sshd, its sessions, Troupe's shells, the jobs). */
async function hostsCpu(hosts: TestHosts): Promise<number> {
  let sum = 0;
  for (const name of names) {
    const pids = (await runCommand('ip', ['netns', 'pids', hosts.host(name).namespace])).split('\n').filter(Boolean).map(Number);
    for (const pid of pids) sum += cpuSeconds(pid) || 0;
  }
  return sum;
}

/** BENCH_END_EVENTS=1: the run's events from its last job's exit on, in ms from submit (where the end goes). */
async function printEnd(client: Client, workflowId: string, submittedMs: number, fromMs: number): Promise<void> {
  const { timeline } = await workflowCost(client, workflowId);
  for (const event of timeline.filter((e) => e.timeMs - submittedMs >= fromMs - 50)) {
    console.log(`  ${fmt(event.timeMs - submittedMs).padStart(7)} ms  ${event.kind}${event.name ? ` ${event.name}` : ''}`);
  }
}

/** Processes created on the whole machine so far (the `processes` line of /proc/stat). */
function forksSoFar(): number {
  return Number(/^processes (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1] ?? Number.NaN);
}

async function main(): Promise<void> {
  console.log(`ssh-scale: 64 sshd hosts, ${bashrc ? "with root's .bashrc" : 'without .bashrc'}, ${ROUNDS} rounds, then ${HOLD_S} s holding 64 running jobs; load average ${loadAverage()}`);
  const env = await startBenchTemporal('ssh-scale');
  const started = performance.now();
  const hosts = await createTestHosts(
    names.map((name) => ({ name, skipBashrc: !bashrc, ...(name.startsWith('l40s') ? { gpus: L40S } : name.startsWith('a10g') ? { gpus: A10G } : {}) })),
  );
  console.log(`ssh-scale: 64 hosts up in ${fmt((performance.now() - started) / 1000, 1)} s`);
  process.env.TROUPE_KNOWN_HOSTS = hosts.knownHostsFile;
  const taskQueue = `bench-ssh-scale-${process.pid}`;
  const fleets = new FleetClient(env.client, { taskQueue });
  const backend = new SshBackend({ fleets, releaseGraceSeconds: 1, jobBaseDir: jobDirOfTestHost(hosts) });
  const worker = await startInProcessWorker(env, taskQueue, { ssh: backend });
  const troupe = new TroupeClient(env.client, { taskQueue });
  const fleet = `bench-scale-${process.pid}`;
  const trust = new HostKeyTrust({ knownHostsFiles: [hosts.knownHostsFile] });
  const commandsSent = async () => {
    let sum = 0;
    for (const name of names) sum += (await connectSsh(hosts.target(name), trust)).commandsSent;
    return sum;
  };
  const results: Record<string, unknown> = {};
  try {
    const yaml = testHostsFleetYaml(hosts, fleet, names);
    const t0 = performance.now();
    const state = await fleets.apply(fleetSpecOf(loadFleetConfig(yaml, `${fleet}.yml`, { environ: {} }), `${fleet}.yml`));
    console.log(`ssh-scale: fleet applied in ${fmt(performance.now() - t0)} ms, ${state.hosts.filter((h) => h.status === 'ready').length} hosts ready`);

    const floors: Array<{ allRunning: number; end: number }> = [];
    const runs: Array<{ allRunning: number; end: number; lastExitSeen: number; runFinished: number }> = [];
    for (let round = 0; round < ROUNDS; round++) {
      floors.push(await floor(hosts));
      const run = `bench-scale-${process.pid}-${round}`;
      const submitted = performance.now();
      const handle = await troupe.submit({ yaml: task(run, 'sleep 1'), fleets: [fleet], checkWorkers: false });
      let allRunning = 0;
      for (;;) {
        const s = await handle.state();
        if (s.jobs.length === 64 && s.jobs.every((j) => j.status !== 'PROVISIONING' && j.status !== 'PULLING' && j.status !== 'SUBMITTED')) {
          allRunning = performance.now() - submitted;
          break;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      const final = await handle.wait();
      // Where the end goes, on the run's own clock: the last job's exit seen, then the run closed (hosts cleaned and given back).
      const since = (iso: string | null) => (iso === null ? Number.NaN : Date.parse(iso) - Date.parse(final.submitted_at));
      const lastExitSeen = Math.max(...final.jobs.map((j) => since(j.finished_at)));
      runs.push({ allRunning, end: performance.now() - submitted, lastExitSeen, runFinished: since(final.finished_at) });
      if (process.env.BENCH_END_EVENTS === '1') await printEnd(env.client, runWorkflowId(run), Date.parse(final.submitted_at), lastExitSeen);
      if (final.status !== 'DONE') console.log(`ssh-scale: round ${round} ended ${final.status}: ${final.message}`);
    }
    const line = (label: string, xs: number[]) => `${label.padEnd(46)} median ${fmt(median(xs)).padStart(6)} ms   (${xs.map((x) => fmt(x)).join(', ')})`;
    console.log(line('floor: 64 parallel ssh sessions, all running', floors.map((f) => f.allRunning)));
    console.log(line('Troupe: submit → all 64 RUNNING', runs.map((r) => r.allRunning)));
    console.log(line('floor: 64 sessions ended', floors.map((f) => f.end)));
    console.log(line('Troupe: submit → last job exit seen by the run', runs.map((r) => r.lastExitSeen)));
    console.log(line('Troupe: submit → run closed (hosts given back)', runs.map((r) => r.runFinished)));
    console.log(line('Troupe: submit → DONE (client sees it)', runs.map((r) => r.end)));
    console.log(`ratio to the floor: all running ×${fmt(median(runs.map((r) => r.allRunning)) / median(floors.map((f) => f.allRunning)), 2)}, end ×${fmt(median(runs.map((r) => r.end)) / median(floors.map((f) => f.end)), 2)}`);
    results.floors = floors;
    results.runs = runs;

    // Holding 64 running jobs: what does watching them cost?
    const hold = `bench-scale-${process.pid}-hold`;
    const handle = await troupe.submit({ yaml: task(hold, `sleep ${HOLD_S + 30}`), fleets: [fleet], checkWorkers: false });
    for (;;) {
      const s = await handle.state();
      if (s.jobs.length === 64 && s.jobs.every((j) => j.status === 'RUNNING')) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    await new Promise((r) => setTimeout(r, 5_000));
    // The fork counter is read inside the bench's own sampling (64 `ip netns pids` each time): not counted.
    const before = { commands: await commandsSent(), hosts: await hostsCpu(hosts), worker: process.cpuUsage(), forks: forksSoFar(), server: env.serverCpuSeconds() };
    await new Promise((r) => setTimeout(r, HOLD_S * 1000));
    const workerUsed = process.cpuUsage(before.worker);
    const forks = forksSoFar();
    const after = { commands: await commandsSent(), hosts: await hostsCpu(hosts), forks, server: env.serverCpuSeconds() };
    const perJobPerS = (seconds: number) => (seconds * 1000) / 64 / HOLD_S;
    const hold64 = {
      seconds: HOLD_S,
      commandsSent: after.commands - before.commands,
      machineForks: after.forks - before.forks,
      workerCpuMsPerJobPerS: perJobPerS((workerUsed.user + workerUsed.system) / 1e6),
      hostsCpuMsPerJobPerS: perJobPerS(after.hosts - before.hosts),
      serverCpuMsPerJobPerS: perJobPerS(after.server - before.server),
      workerRssMiB: process.memoryUsage().rss / 2 ** 20,
    };
    console.log(`holding 64 running jobs for ${HOLD_S} s: ${hold64.commandsSent} commands sent to the hosts; processes created on the whole machine: ${hold64.machineForks} (load average ${loadAverage()})`);
    console.log(`  CPU per running job per second: worker (this process) ${fmt(hold64.workerCpuMsPerJobPerS, 3)} ms, hosts ${fmt(hold64.hostsCpuMsPerJobPerS, 3)} ms, Temporal server ${fmt(hold64.serverCpuMsPerJobPerS, 3)} ms; worker RSS ${fmt(hold64.workerRssMiB)} MiB`);
    results.hold = hold64;
    await handle.stop();
    await handle.wait();
  } finally {
    await fleets.delete(fleet, { force: true }).catch(() => undefined);
    await worker.stop();
    await closeAllSshSessions();
    await hosts.destroy();
    await env.close();
  }
  writeFileSync(join(resultsDir(), 'ssh-scale.json'), `${JSON.stringify({ bashrc, ...results }, null, 2)}\n`);
  console.log(`wrote ${await plotSshScale(SshScaleResultsSchema.parse({ bashrc, ...results }))}`);
}

await main();
