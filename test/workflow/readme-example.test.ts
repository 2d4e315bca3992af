import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeLocalFleet } from '../helpers/local-fleet';
import { abortRunIfRunning } from '../helpers/stand-in-service';
import { temporalAddress, testClient } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';
import { TroupeClient } from '../../src/client';

/** The README's client SDK example, extracted from README.md and run as a user's script would run. */

const root = fileURLToPath(new URL('../..', import.meta.url));
const scratch = join(root, '.troupe', 'readme-example');
const fleet = makeLocalFleet('troupe-readme-');
/** The README's example submits its sample, whose name is this. */
const runName = 'pd-disagg-local';
/** The example is killed past this, so the test says what the run was doing rather than timing out. */
const exampleDeadlineMs = 90_000;
let worker: Awaited<ReturnType<typeof startTroupeWorker>>;
let client: Awaited<ReturnType<typeof testClient>>;

beforeAll(async () => {
  worker = await startTroupeWorker({ local: fleet.backend });
  client = await testClient();
});
afterAll(async () => {
  if (client) await abortRunIfRunning(client.client, runName);
  await worker?.stop();
  await client?.close();
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
    const killer = setTimeout(() => child.kill('SIGKILL'), exampleDeadlineMs);
    const exit = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    clearTimeout(killer);
    expect(exit, exit === 0 ? '' : await whatHappened(exit, stdout, stderr)).toBe(0);
    expect(stdout).toMatch(/^(SUBMITTED|PROVISIONING|RUNNING)$/m);
    expect(stdout).toContain('DONE ALL_JOBS_DONE');
    expect(stdout).toContain('router: prefill prefill/0 -> decode decode/0: Hello, world');
  });
});

/** A failed example's story: what it printed, and where its run was then. */
async function whatHappened(exit: number | null, stdout: string, stderr: string): Promise<string> {
  const how = exit === null ? `killed after ${exampleDeadlineMs / 1000} s` : `exit ${exit}`;
  const state = await new TroupeClient(client.client, { taskQueue: worker.taskQueue })
    .run(runName)
    .state()
    .then((s) => JSON.stringify({ status: s.status, termination_reason: s.termination_reason, jobs: s.jobs.map((j) => [j.job_name, j.status, j.termination_reason, j.previous_attempts?.length ?? 0]) }))
    .catch((err: unknown) => `no state: ${err instanceof Error ? err.message : String(err)}`);
  return `the example: ${how}\nstdout:\n${stdout}\nstderr:\n${stderr}\nthe run: ${state}`;
}
