/**
 * The bare cost of one Temporal hop on this machine, without Troupe: a signal from one workflow to
 * another (ping-pong between two workflows), a trivial activity awaited by its workflow, and two
 * workflows signalling each other at the same moment, each `BENCH_HOPS` times in a row (50 by
 * default), on the benches' own dev server (Troupe's settings, src/devserver/dev-server.ts) and an
 * in-process worker. BENCH_SERVER_DEFAULTS=1: the dev server without Troupe's settings, to compare.
 *
 *   npx tsx bench/hop-latency.ts
 *
 * What every hop of a run's launch costs at least (see BENCHMARKS.md). Prints figures; asserts nothing.
 */
import { fileURLToPath } from 'node:url';
import { NativeConnection, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { quietBundler } from '../src/worker/create-worker';
import { failureConverterPath, troupeDataConverter } from '../src/codec/data-converter';
import { fmt, median, percentile } from './harness/stats';
import { startBenchTemporal } from './harness/temporal-env';

const HOPS = Number(process.env.BENCH_HOPS ?? 50);
const env = await startBenchTemporal('hops');
console.log(`hop-latency: Temporal: ${env.kind}`);
const { code } = await bundleWorkflowCode({
  workflowsPath: fileURLToPath(new URL('./harness/hop-workflows.ts', import.meta.url)),
  failureConverterPath,
  logger: quietBundler,
});
const taskQueue = `bench-hops-${process.pid}`;
const connection = await NativeConnection.connect({ address: env.address });
const worker = await Worker.create({ connection, taskQueue, workflowBundle: { code }, dataConverter: troupeDataConverter(), activities: { noop: async () => undefined } });
const running = worker.run();

const steps = (stamps: number[], per: number) => stamps.slice(1).map((t, i) => (t - (stamps[i] ?? t)) / per);
const line = (label: string, xs: number[]) => `${label.padEnd(44)} median ${fmt(median(xs), 1).padStart(6)} ms   p90 ${fmt(percentile(xs, 90), 1).padStart(6)} ms`;
try {
  for (let round = 1; round <= 2; round++) {
    const ping = `hops-ping-${process.pid}-${round}`;
    const pong = `hops-pong-${process.pid}-${round}`;
    await env.client.workflow.start('PongWorkflow', { taskQueue, workflowId: pong, args: [ping, HOPS] });
    const pinger = await env.client.workflow.start('PingWorkflow', { taskQueue, workflowId: ping, args: [pong, HOPS] });
    const signalStamps = (await pinger.result()) as number[];
    const chain = await env.client.workflow.start('ActivityChainWorkflow', { taskQueue, workflowId: `hops-chain-${process.pid}-${round}`, args: [HOPS] });
    const activityStamps = (await chain.result()) as number[];
    const crossing = await Promise.all(
      ['a', 'b'].map((side) =>
        env.client.workflow.start('CrossWorkflow', {
          taskQueue,
          workflowId: `hops-cross-${side}-${process.pid}-${round}`,
          args: [`hops-cross-${side === 'a' ? 'b' : 'a'}-${process.pid}-${round}`, HOPS],
        }),
      ),
    );
    const crossStamps = (await Promise.all(crossing.map((h) => h.result()))) as number[][];
    if (round === 1) continue; // warm-up
    console.log(`hop-latency: ${HOPS} hops in a row each, one in-process worker`);
    console.log(line('signal, workflow → workflow (and its task)', steps(signalStamps, 2)));
    console.log(line('activity, scheduled → result in the workflow', steps(activityStamps, 1)));
    const rounds = steps(crossStamps[0] ?? [], 1);
    console.log(`${line('two workflows signalling each other at once', rounds)}   slowest ${fmt(Math.max(...rounds))} ms`);
  }
} finally {
  worker.shutdown();
  await running;
  await connection.close();
  await env.close();
}
