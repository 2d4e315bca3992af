/**
 * Every bench, one after the other (`npm run bench`): launch latency on the local fleet and SSH
 * test hosts, scale and concurrency on the simulated backend, healing and resizing on the local
 * fleet and SSH test hosts, a service's rollout and autoscaling under load on the local fleet. Each bounds its own time; the output is also written to
 * bench/results/run-all.log. Nothing is asserted.
 */
import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadAverage } from './harness/cpu';
import { resultsDir } from './harness/results';

const BENCHES = ['launch-latency.ts', 'scale.ts', 'concurrency.ts', 'heal.ts', 'rollout.ts', 'autoscale.ts'];
const log = createWriteStream(join(resultsDir(), 'run-all.log'));
const say = (text: string) => {
  process.stdout.write(text);
  log.write(text);
};

function runBench(file: string): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL(file, import.meta.url))], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout.on('data', (chunk: Buffer) => say(chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => say(chunk.toString()));
    child.once('exit', (code) => resolve(code ?? 1));
  });
}

const started = Date.now();
say(`bench: ${new Date().toISOString()}, node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), ${Math.round(totalmem() / 2 ** 30)} GiB, load average ${loadAverage()}\n`);
let failed = 0;
for (const file of BENCHES) {
  const t0 = Date.now();
  say(`\n=== ${file} ===\n`);
  const code = await runBench(file);
  if (code !== 0) failed += 1;
  say(`=== ${file}: exit ${code}, ${((Date.now() - t0) / 1000).toFixed(0)} s ===\n`);
}
say(`\nbench: all done in ${((Date.now() - started) / 1000).toFixed(0)} s${failed > 0 ? `, ${failed} bench(es) failed` : ''}\n`);
log.end();
process.exitCode = failed > 0 ? 1 : 0;
