import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGateway, type RunningGateway } from '../../src/gateway/gateway';
import { projectRoot } from '../../src/devserver/dev-server';
import { runWorkflowId } from '../../src/contract/ids';
import { stopRunSignal } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { leftovers, type Leftovers } from '../../test/helpers/leftovers';
import { makeSharedDir } from '../../test/helpers/local-fleet';
import { abortRunIfRunning } from '../../test/helpers/stand-in-service';
import { startBenchTemporal, type BenchTemporal } from './temporal-env';
import { startWorkerProcess, type WorkerProcess } from './worker-process';

/**
 * What a bench of the stand-in service (examples/services/stand-in-model.py) on the LOCAL fleet
 * stands on: its own Temporal, the stand-in copied where the fleet's nodes read it, a gateway in the
 * bench's process on loopback, and a worker process with the local fleet (network namespaces, as
 * root) that pushes its tables to that gateway. `close` aborts the runs a failed bench left going,
 * then stops everything it started and removes its directories.
 */
export interface StandInServiceBench {
  temporal: BenchTemporal;
  gateway: RunningGateway;
  taskQueue: string;
  /** The stand-in's path, as the replicas' commands name it. */
  script: string;
  fleetDir: string;
  close(runs: string[]): Promise<void>;
}

export async function startStandInServiceBench(bench: string): Promise<StandInServiceBench> {
  const temporal = await startBenchTemporal(bench);
  const shared = makeSharedDir(`troupe-bench-${bench}-shared-`);
  const fleetDir = mkdtempSync(join(tmpdir(), `troupe-bench-${bench}-fleet-`));
  const script = join(shared.dir, 'stand-in-model.py');
  copyFileSync(join(projectRoot, 'examples', 'services', 'stand-in-model.py'), script);
  chmodSync(script, 0o644);
  const token = `admin-${randomBytes(12).toString('hex')}`;
  const gateway = await startGateway({ listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, adminToken: token });
  const taskQueue = `bench-${bench}-${randomBytes(3).toString('hex')}`;
  let worker: WorkerProcess | null = null;
  const close = async (runs: string[]) => {
    for (const name of runs) await abortRunIfRunning(temporal.client, name).catch(() => undefined);
    await worker?.stop();
    await gateway.close(1000);
    await temporal.close();
    shared.remove();
    rmSync(fleetDir, { recursive: true, force: true });
  };
  try {
    worker = await startWorkerProcess({
      address: temporal.address,
      task_queue: taskQueue,
      bundle_path: temporal.bundlePath,
      backend: { kind: 'local', state_dir: fleetDir, network: 'netns' },
      gateways: [{ url: gateway.adminUrl, token }],
    });
  } catch (err) {
    await close([]);
    throw err;
  }
  return { temporal, gateway, taskQueue, script, fleetDir, close };
}

/** The run asked to stop (not aborted), its end awaited: what it left on the machine. */
export async function stopStandInRun(bench: StandInServiceBench, name: string): Promise<Leftovers> {
  const handle = bench.temporal.client.workflow.getHandle(runWorkflowId(name));
  await handle.signal(stopRunSignal, { abort: false });
  return leftovers((await handle.result()) as RunState, bench.fleetDir);
}
