import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runWorkflowId } from '../../src/contract/ids';
import { stopRunSignal } from '../../src/contract/messages';
import type { RunState } from '../../src/contract/run-state';
import { makeLocalFleet, makeSharedDir, processGroupMembers } from '../helpers/local-fleet';
import { makePlan } from '../helpers/plans';
import { useLocalTroupe } from '../helpers/local-troupe';

/**
 * Env values full of shell metacharacters, submitted as YAML through the client SDK (planner,
 * sealing of secret-looking names, workflow, runner's env file) to real processes on the local
 * fleet: every value reaches the node byte for byte, and nothing in them is ever executed.
 */

// The client seals secret-looking names and the in-process worker opens them: one key for both,
// kept out of the project's own key file.
process.env.TROUPE_SECRET_KEY = randomBytes(32).toString('base64');

const fleet = makeLocalFleet('troupe-hostile-env-');
const shared = makeSharedDir('troupe-hostile-env-out-');
const env = useLocalTroupe(fleet, { cleanup: () => shared.remove() });

/** Any file a value manages to create lands here; the directory must stay empty. */
const canaryDir = join(shared.dir, 'canary');
const canary = (n: number) => join(canaryDir, `c${n}`);

const hostileValues: string[] = [
  `$(mkdir -p ${canaryDir}; touch ${canary(0)})`,
  `\`mkdir -p ${canaryDir}; touch ${canary(1)}\``,
  `a; mkdir -p ${canaryDir}; touch ${canary(2)}`,
  `a && mkdir -p ${canaryDir} && touch ${canary(3)}`,
  `a | tee ${canary(4)}`,
  `'; mkdir -p ${canaryDir}; touch ${canary(5)}; '`,
  `"; mkdir -p ${canaryDir}; touch ${canary(6)}; "`,
  `line one\nmkdir -p ${canaryDir}; touch ${canary(7)}\nline three`,
  `\${IFS}touch\${IFS}${canary(8)}`,
  `> ${canary(9)}`,
  `'"'"'$(touch ${canary(10)})'"'"'`,
  `$'\\x41'\\n\\t\\\\`,
  '$HOME ${HOME} $0 $$ $! $? $# $@ $*',
  '* ? [a-z] {a,b} ~ ~root !! !-1 #not-a-comment',
  '%s %n %x %%',
  '-e -n --help',
  '  leading and trailing spaces  ',
  'tab\there, carriage\rreturn, form\ffeed, vertical\vtab, bell\x07, escape\x1b[31m',
  'EOF\nPY\nEND',
  'unicode: café, 日本語, 🚀, \u2028 line separator, \u00a0 nbsp, \u202e right-to-left',
  '',
  '=',
  '\\',
  `${'long '.repeat(20_000)}end`,
];

/** A working directory that a shell would misread, were it ever unquoted; an image that is refused for it. */
const hostileWorkingDir = join(shared.dir, `wd $(mkdir -p ${canaryDir}; touch ${canary(80)}) ; \`touch ${canary(81)}\` '"`);
const hostileImage = `img"\n$(mkdir -p ${canaryDir}; touch ${canary(82)})\n`;

/** YAML with each value double-quoted (JSON escapes are YAML escapes), printing each to its own file. */
function hostileTask(name: string, outDir: string, values: readonly string[], fromShell: readonly string[], image = 'ubuntu:24.04'): string {
  const names = [...values.map((_, i) => `V${i}`), ...fromShell];
  return [
    'type: task',
    `name: ${name}`,
    `image: ${JSON.stringify(image)}`,
    `working_dir: ${JSON.stringify(hostileWorkingDir)}`,
    'env:',
    ...values.map((v, i) => `  - ${JSON.stringify(`V${i}=${v}`)}`),
    ...fromShell.map((key) => `  - ${key}`),
    'groups:',
    '  - name: node',
    '    commands:',
    ...names.map((n) => `      - printf '%s' "$${n}" > ${outDir}/${n}`),
    `      - printf '%s' "$PWD" > ${outDir}/PWD`,
    `      - ls ${canaryDir} > ${outDir}/canary-listing 2>&1 || true`,
    '',
  ].join('\n');
}

describe('hostile env values on a real node', () => {
  it('an image that is no image reference (a shell command in it) is refused at submit; nothing in it runs', async () => {
    const yaml = hostileTask(`hostile-image-${env.worker.taskQueue.slice(-8)}`, shared.dir, [], [], hostileImage);
    await expect(env.troupe.submit({ yaml })).rejects.toThrow(/image: ".*" is not an image reference/s);
    expect(existsSync(canaryDir) ? readdirSync(canaryDir) : []).toEqual([]);
  });

  it('reach the job byte for byte (and working_dir is taken literally), through the planner, sealing and the env file; nothing in them runs', async () => {
    const name = `hostile-env-${env.worker.taskQueue.slice(-8)}`;
    const outDir = join(shared.dir, 'out');
    const fromShell = { HF_TOKEN: `tok'en$(touch ${canary(90)})\n\`touch ${canary(91)}\``, PLAIN_FROM_SHELL: `; touch ${canary(92)}` };
    const yaml = hostileTask(name, outDir, hostileValues, Object.keys(fromShell));
    mkdirSync(outDir, { recursive: true });
    // Written by the job, which runs as its run's own user (as root).
    chmodSync(outDir, 0o777);

    const handle = await env.troupe.submit({ yaml, environ: fromShell, options: { stop_grace_s: 1 } });
    const final = await handle.wait();
    expect(final.status, final.message ?? '').toBe('DONE');

    hostileValues.forEach((value, i) => {
      expect(readFileSync(join(outDir, `V${i}`)), `V${i} = ${JSON.stringify(value).slice(0, 80)}`).toEqual(Buffer.from(value, 'utf8'));
    });
    for (const [key, value] of Object.entries(fromShell)) {
      expect(readFileSync(join(outDir, key)), key).toEqual(Buffer.from(value, 'utf8'));
    }
    expect(readFileSync(join(outDir, 'PWD'), 'utf8'), 'the commands ran in the literal working_dir').toBe(hostileWorkingDir);
    // Nothing any value asked for ran: no canary, before or after the job's own commands.
    expect(existsSync(canaryDir) ? readdirSync(canaryDir) : []).toEqual([]);
    expect(readFileSync(join(outDir, 'canary-listing'), 'utf8')).toMatch(/No such file or directory/);
    for (const job of final.jobs) if (job.pid !== null) expect(processGroupMembers(job.pid)).toEqual([]);
  }, 120_000);

  // The planner refuses NUL; a hand-made plan gets past it, and the batch start fails the job at once.
  it('a NUL byte in an env value fails the run with its reason within 30 s, not after minutes of retries', async () => {
    const name = `hostile-nul-${env.worker.taskQueue.slice(-8)}`;
    const plan = makePlan(name, [{ name: 'node', nodes: 1, commands: ['true'] }], { env: { A: 'a\0b' } });
    const handle = await env.client.workflow.start('RunWorkflow', {
      taskQueue: env.worker.taskQueue,
      workflowId: runWorkflowId(name),
      args: [{ plan, backend: 'local', options: { stop_grace_s: 1, runner_ready_timeout_s: 10 } }],
    });
    const outcome = await Promise.race([
      handle.result().then((s) => s as RunState),
      new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 30_000)),
    ]);
    if (outcome === 'hung') {
      // Stop it so that teardown gives its node back; terminate only if even that does not end it.
      await handle.signal(stopRunSignal, { abort: true });
      const stopped = await Promise.race([handle.result().then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 30_000))]);
      if (!stopped) await handle.terminate('the test gave up on it');
    }
    expect(outcome, 'the run never ended').not.toBe('hung');
    const state = outcome as RunState;
    expect(state.status).toBe('FAILED');
    expect(`${state.message ?? ''} ${state.jobs.map((j) => j.message ?? '').join(' ')}`).toMatch(/NUL/);
  }, 120_000);
});
