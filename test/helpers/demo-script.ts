import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { projectRoot } from '../../src/devserver/dev-server';
import { freePort } from './free-port';

/** `npm run demo`'s script as a user runs it, on ports and state directories of its own under `scratch`. */

export interface DemoEnv {
  env: NodeJS.ProcessEnv;
  uiAddress: string;
}

export async function demoEnv(scratch: string): Promise<DemoEnv> {
  const [port, uiPort, codecPort] = [await freePort(), await freePort(), await freePort()];
  return {
    uiAddress: `http://127.0.0.1:${uiPort}`,
    env: {
      ...process.env,
      NO_COLOR: '1',
      TROUPE_DEV_SERVER_PORT: String(port),
      TROUPE_DEV_SERVER_UI_PORT: String(uiPort),
      TROUPE_CODEC_ENDPOINT: `http://127.0.0.1:${codecPort}`,
      TROUPE_STATE_DIR: join(scratch, 'state'),
      TROUPE_LOCAL_STATE_DIR: join(scratch, 'local'),
    },
  };
}

/** Runs scripts/demo.ts with `args`; `onOutput` sees the output so far and may signal the demo (Ctrl-C). */
export function runDemo(env: NodeJS.ProcessEnv, args: string[] = [], onOutput?: (output: string, child: ChildProcess) => void): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/demo.ts', ...args], { cwd: projectRoot, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const take = (d: Buffer) => {
      output += d.toString();
      onOutput?.(output, child);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.once('error', reject);
    child.once('exit', (code, signal) => resolve({ code: code ?? (signal ? 128 : 1), output }));
  });
}
