import { DevServerPortTaken, devServerOptionsFromEnv, runningDevServer, startDevServer, stopDevServer } from '../src/devserver/dev-server';
import { startCodecSidecar, stopCodecSidecar } from '../src/devserver/codec-sidecar';

/**
 * `npm run dev-server -- start|stop|status`: the embedded Temporal dev server and, beside it, the
 * codec server its Web UI decodes payloads through; both stopped by their pids.
 */
const opts = devServerOptionsFromEnv();
const command = process.argv[2] ?? 'status';
if (command === 'start') {
  const h = await startDevServer(opts).catch((err: unknown) => {
    if (!(err instanceof DevServerPortTaken)) throw err;
    console.error(err.message);
    process.exit(1);
  });
  const codec = await startCodecSidecar(opts);
  console.log(`Temporal dev server ready at ${h.address} (${h.reused ? 'already running, ' : ''}pid ${h.pid}); Web UI ${h.uiAddress}${codec ? `; codec server ${codec.endpoint}` : ''}`);
} else if (command === 'stop') {
  const codec = await stopCodecSidecar(opts);
  console.log((await stopDevServer(opts)) ? `stopped${codec ? ' (and its codec server)' : ''}` : 'not running');
} else if (command === 'status') {
  const pid = runningDevServer(opts);
  console.log(pid === null ? 'not running' : `running (pid ${pid})`);
  process.exitCode = pid === null ? 3 : 0;
} else {
  console.error(`usage: dev-server start|stop|status`);
  process.exitCode = 2;
}
