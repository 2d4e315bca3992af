import type { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  InvalidConfigError,
  NoWorkerError,
  RunNameInUseError,
  InvalidRunNameError,
  RunNotFoundError,
  TroupeClient,
  TroupeSearchAttributes,
} from '../../src/client';
import { runWorkflowId } from '../../src/contract/ids';
import { makePlan } from '../helpers/plans';
import { temporalAddress, testClient, uniqueTaskQueue } from '../helpers/temporal';

/**
 * The client's typed errors against the real dev server. No worker polls these task queues, so a
 * run started here (with checkWorkers off) stays SUBMITTED until the test terminates it.
 */

let client: Client;
let close: () => Promise<void>;
let troupe: TroupeClient;
const taskQueue = uniqueTaskQueue('client-errors');
const started: string[] = [];

beforeAll(async () => {
  ({ client, close } = await testClient());
  troupe = new TroupeClient(client, { taskQueue, address: temporalAddress(), queryTimeoutMs: 2_000 });
});
afterAll(async () => {
  for (const workflowId of started) await client.workflow.getHandle(workflowId).terminate('test over').catch(() => undefined);
  await close?.();
});

function uniqueName(prefix: string): string {
  return `${prefix}-${taskQueue.slice(-8)}`;
}

const validYaml = (name: string) => `type: task\nname: ${name}\ngroups:\n  - name: a\n    commands: ["echo hi"]\n  - name: b\n    nodes: 2\n    commands: ["echo hi"]\n`;

describe('client errors', () => {
  it('an invalid config is InvalidConfigError with file, line, column and field path, before any server call', async () => {
    const err = await troupe
      .submit({ yaml: 'type: task\nname: ok-name\ngroups:\n  - name: a\n    nodes: 0\n    commands: [x]\n', file: 'task.yml' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidConfigError);
    expect(err).toMatchObject({ file: 'task.yml', line: 5, col: 12, path: 'groups[0].nodes' });
    expect((err as Error).message).toMatch(/^task\.yml:5:12: groups\[0\]\.nodes: /);
  });

  it('bare env keys come from the given environ, not from process.env', async () => {
    const yaml = 'type: task\nname: env-check\nenv:\n  - TROUPE_TEST_UNSET_VAR\ncommands: [x]\n';
    const err = await troupe.submit({ yaml, environ: {} }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidConfigError);
    expect(err).toMatchObject({ file: '<yaml>', line: 4, path: 'env[0]' });
    // With the variable given, the config is fine and the next check (the worker) is what refuses.
    await expect(troupe.submit({ yaml, environ: { TROUPE_TEST_UNSET_VAR: 'x' } })).rejects.toBeInstanceOf(NoWorkerError);
  });

  it('invalid run options are InvalidConfigError naming the option', async () => {
    const err = await troupe
      .submit({ plan: makePlan('opts-check', [{ name: 'a', nodes: 1 }]), options: { runner_ready_timeout_s: -1 } })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidConfigError);
    expect(err).toMatchObject({ file: '<options>', path: 'runner_ready_timeout_s' });
  });

  it('no worker on the task queue is NoWorkerError naming queue, namespace and address; nothing starts', async () => {
    const name = uniqueName('no-worker');
    const err = await troupe.submit({ yaml: validYaml(name) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoWorkerError);
    const noWorker = err as NoWorkerError;
    expect(noWorker.taskQueue).toBe(taskQueue);
    expect(noWorker.namespace).toBe('default');
    expect(noWorker.missing).toEqual(['workflow', 'activity']);
    expect(noWorker.message).toContain(`"${taskQueue}"`);
    expect(noWorker.message).toContain(temporalAddress());
    expect(noWorker.message).toContain('troupe worker');
    await expect(troupe.run(name).state()).rejects.toBeInstanceOf(RunNotFoundError);
  });

  it('an unknown run is RunNotFoundError for state, wait, stop and logs', async () => {
    const run = troupe.run(uniqueName('never-was'));
    await expect(run.state()).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(run.wait()).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(run.stop()).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(run.readLog(0)).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(run.state()).rejects.toThrow(/troupe ps -a/);
  });

  it('a name that is no run name (a group workflow id, capitals) is InvalidRunNameError, saying what a run name looks like', () => {
    expect(() => troupe.run('run/x/group/router')).toThrow(InvalidRunNameError);
    expect(() => troupe.run('Router')).toThrow(/is not a run name: a run name is lowercase letters, digits and -/);
  });

  it('starts with memo and search attributes; a second run of the same name is RunNameInUseError', async () => {
    const name = uniqueName('in-use');
    const handle = await troupe.submit({ yaml: validYaml(name), checkWorkers: false, backend: 'local' });
    started.push(handle.workflowId);
    expect(handle.workflowId).toBe(runWorkflowId(name));
    const info = await handle.describe();
    expect(info.type).toBe('RunWorkflow');
    expect(info.taskQueue).toBe(taskQueue);
    expect(info.memo).toMatchObject({ run_name: name, backend: 'local', nodes_num: 3, groups: [{ name: 'a', nodes: 1 }, { name: 'b', nodes: 2 }] });
    expect(info.typedSearchAttributes.get(TroupeSearchAttributes.runName)).toBe(name);
    expect(info.typedSearchAttributes.get(TroupeSearchAttributes.runStatus)).toBe('SUBMITTED');
    expect(info.typedSearchAttributes.get(TroupeSearchAttributes.groups)).toEqual(['a', 'b']);
    expect(info.typedSearchAttributes.get(TroupeSearchAttributes.fleet)).toBe('local');

    const again = await troupe.submit({ yaml: validYaml(name), checkWorkers: false }).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(RunNameInUseError);
    expect((again as RunNameInUseError).runName).toBe(name);
    expect((again as Error).message).toContain(`troupe stop ${name}`);
  });

  it('the state of a run no worker serves is NoWorkerError, and list still shows it from its memo', async () => {
    const name = uniqueName('unserved');
    const handle = await troupe.submit({ yaml: validYaml(name), checkWorkers: false });
    started.push(handle.workflowId);
    const err = await handle.state().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoWorkerError);
    expect((err as Error).message).toContain(`read the state of run ${name}`);

    let summary;
    for (let i = 0; i < 50 && !summary; i++) {
      summary = (await troupe.list()).find((r) => r.name === name);
      if (!summary) await new Promise((r) => setTimeout(r, 200));
    }
    expect(summary).toMatchObject({
      name,
      open: true,
      status: 'SUBMITTED',
      backend: 'local',
      groups: [{ name: 'a', nodes: 1 }, { name: 'b', nodes: 2 }],
      state: null,
    });
    expect(summary?.stateError).toContain('no Troupe worker polls');
  });

  it('stop of a run that has ended is a no-op that says so', async () => {
    const name = uniqueName('ended');
    const handle = await troupe.submit({ yaml: validYaml(name), checkWorkers: false });
    await client.workflow.getHandle(handle.workflowId).terminate('ended for the test');
    expect(await handle.stop()).toBe(false);
    expect(await handle.abort()).toBe(false);
    // Terminated outside Troupe, with no worker to replay it: the memo gives the shape.
    const state = await handle.wait();
    expect(state).toMatchObject({ run_name: name, status: 'TERMINATED', backend: 'local', jobs: [] });
    expect(state.message).toContain('ended for the test');
    expect(state.groups.map((g) => g.name)).toEqual(['a', 'b']);
  });
});
