import { DevServerPortTaken, devServerOptionsFromEnv, runningDevServer, startDevServer, stopDevServer } from '../src/devserver/dev-server';

/** `npm run dev-server -- start|stop|status`: the embedded Temporal dev server, stopped by its pid. */
const opts = devServerOptionsFromEnv();
const command = process.argv[2] ?? 'status';
if (command === 'start') {
  const h = await startDevServer(opts).catch((err: unknown) => {
    if (!(err instanceof DevServerPortTaken)) throw err;
    console.error(err.message);
    process.exit(1);
  });
  console.log(`Temporal dev server ready at ${h.address} (${h.reused ? 'already running, ' : ''}pid ${h.pid}); Web UI ${h.uiAddress}`);
} else if (command === 'stop') {
  console.log((await stopDevServer(opts)) ? 'stopped' : 'not running');
} else if (command === 'status') {
  const pid = runningDevServer(opts);
  console.log(pid === null ? 'not running' : `running (pid ${pid})`);
  process.exitCode = pid === null ? 3 : 0;
} else {
  console.error(`usage: dev-server start|stop|status`);
  process.exitCode = 2;
}
