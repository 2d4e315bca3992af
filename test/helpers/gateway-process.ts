import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { projectRoot } from '../../src/devserver/dev-server';

export interface GatewayProcess {
  child: ChildProcess;
  /** The data plane, as users are told it is. */
  url: string;
  adminUrl: string;
  /** The admin token's file (mode 0600), for a worker's `--gateway-token-file`. */
  adminTokenFile: string;
}

/**
 * `troupe gateway` as a user starts it, on 127.0.0.1 at ports the system picks, its admin token in
 * `dir`; resolved once it prints its start line. `args`: more of its flags, such as `--workers 2`.
 */
export async function startGatewayProcess(dir: string, args: string[] = []): Promise<GatewayProcess> {
  const adminTokenFile = join(dir, 'gateway-admin.token');
  writeFileSync(adminTokenFile, `${randomBytes(24).toString('hex')}\n`, { mode: 0o600 });
  const child = spawn(process.execPath, [join(projectRoot, 'bin', 'troupe.js'), 'gateway', '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0', '--admin-token-file', adminTokenFile, ...args], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  let started = false;
  return await new Promise((resolve, reject) => {
    const read = (chunk: Buffer) => {
      // Read on after its start line (the pipe must not fill), kept only until then.
      if (started) return;
      log += chunk.toString();
      // Its start line: `Gateway on …, shown to users as URL (…); admin API on URL; …`.
      const match = /shown to users as (\S+) .*admin API on (\S+);/.exec(log);
      if (match) {
        started = true;
        resolve({ child, url: match[1] as string, adminUrl: match[2] as string, adminTokenFile });
      }
    };
    child.stdout?.on('data', read);
    child.stderr?.on('data', read);
    child.once('exit', (code) => reject(new Error(`the gateway exited (${code}): ${log}`)));
  });
}
