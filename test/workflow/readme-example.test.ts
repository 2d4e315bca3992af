import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeLocalFleet } from '../helpers/local-fleet';
import { temporalAddress } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';

/** The README's client SDK example, extracted from README.md and run as a user's script would run. */

const root = fileURLToPath(new URL('../..', import.meta.url));
const scratch = join(root, '.troupe', 'readme-example');
const fleet = makeLocalFleet('troupe-readme-');
let worker: Awaited<ReturnType<typeof startTroupeWorker>>;

beforeAll(async () => {
  worker = await startTroupeWorker({ local: fleet.backend });
});
afterAll(async () => {
  await worker?.stop();
  fleet.remove();
  rmSync(scratch, { recursive: true, force: true });
});

function readmeExample(): string {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## From your own code'));
  const match = /```ts\n([\s\S]*?)```/.exec(section);
  if (!match?.[1]) throw new Error('no ```ts block in the README section "From your own code"');
  return match[1];
}

describe('README', () => {
  it('the client SDK example runs against the dev server: submit, state, wait, log', async () => {
    const code = readmeExample();
    expect(code).toContain("from 'troupe'");
    mkdirSync(scratch, { recursive: true });
    // Inside the project, `import … from 'troupe'` resolves to the package itself (its "exports").
    const file = join(scratch, 'example.ts');
    writeFileSync(file, code);
    const child = spawn(process.execPath, ['--import', 'tsx', file], {
      cwd: root,
      env: { ...process.env, TEMPORAL_ADDRESS: temporalAddress(), TROUPE_TASK_QUEUE: worker.taskQueue, TROUPE_SECRET_KEY_FILE: join(scratch, 'key') },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exit = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(exit, stderr).toBe(0);
    expect(stdout).toMatch(/^(SUBMITTED|PROVISIONING|RUNNING)$/m);
    expect(stdout).toContain('DONE ALL_JOBS_DONE');
    expect(stdout).toContain('router: prefill prefill/0 -> decode decode/0: Hello, world');
  });
});
