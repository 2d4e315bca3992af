import { describe, expect, it } from 'vitest';
import {
  JobNotFoundError,
  RunNameInUseError,
  RunUnreachableError,
  TroupeClient,
  TroupeClientError,
  type JobLogChunk,
  type RunState,
} from '../../src/client';
import { makeLocalFleet } from '../helpers/local-fleet';
import { temporalAddress, uniqueTaskQueue } from '../helpers/temporal';
import { startTroupeWorker } from '../helpers/troupe-worker';
import { useLocalTroupe } from '../helpers/local-troupe';

/** The client SDK against a real worker, the real workflows and the local fleet (real processes). */

const fleet = makeLocalFleet('troupe-client-sdk-');
const env = useLocalTroupe(fleet);

let counter = 0;
function runName(prefix: string): string {
  return `${prefix}-${++counter}-${env.worker.taskQueue.slice(-8)}`;
}

/** Two groups: a head that names its peer by address, and two workers. */
function twoGroups(name: string, workerCommand = 'echo "worker $DSTACK_NODE_GROUP_NODE_RANK of $DSTACK_NODE_GROUP_NODES_NUM"'): string {
  return [
    'type: task',
    `name: ${name}`,
    'groups:',
    '  - name: head',
    '    commands:',
    '      - echo "head $DSTACK_NODE_RANK of $DSTACK_NODES_NUM"',
    '      - echo "peer ${{ groups[1].nodes[1].IP_ADDRESS }}"',
    '  - name: workers',
    '    nodes: 2',
    '    commands:',
    `      - ${JSON.stringify(workerCommand)}`,
    '',
  ].join('\n');
}

const quick = { stop_grace_s: 1, retry_backoff_s: 1 };

async function collect(chunks: AsyncIterable<JobLogChunk>): Promise<Map<number, string>> {
  const logs = new Map<number, string>();
  for await (const chunk of chunks) logs.set(chunk.job_num, (logs.get(chunk.job_num) ?? '') + chunk.data);
  return logs;
}

describe('client SDK on a real worker', () => {
  it('submits from YAML, waits for the end, reads state and every job\'s log', async () => {
    const name = runName('sdk-done');
    const handle = await env.troupe.submit({ yaml: twoGroups(name), options: quick });
    const final = await handle.wait();
    expect(final).toMatchObject({ run_name: name, status: 'DONE', termination_reason: 'ALL_JOBS_DONE', backend: 'local' });
    expect(final.jobs.map((j) => [j.job_num, j.group_name, j.group_job_index, j.status])).toEqual([
      [0, 'head', 0, 'DONE'],
      [1, 'workers', 0, 'DONE'],
      [2, 'workers', 1, 'DONE'],
    ]);
    // A closed run's state is its result.
    expect(await handle.state()).toEqual(final);

    const peer = final.jobs[2]?.instance?.internal_ip;
    expect(peer).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const head = await handle.readLog(0);
    expect(head.data).toBe(`head 0 of 3\npeer ${peer}\n`);
    expect(head.next_offset).toBe(Buffer.byteLength(head.data));
    expect((await handle.readLog(0, { offset: head.next_offset })).data).toBe('');
    expect((await handle.readLog(0, { offset: 5, limitBytes: 3 })).data).toBe('0 o');

    const logs = await collect(handle.streamLogs({ jobs: [1, 2] }));
    expect(logs).toEqual(new Map([[1, 'worker 0 of 2\n'], [2, 'worker 1 of 2\n']]));
    await expect(handle.readLog(3)).rejects.toBeInstanceOf(JobNotFoundError);
  });

  it('connects on its own, as a user script would: connect, submit, state, wait, close', async () => {
    const sdk = await TroupeClient.connect({ address: temporalAddress(), namespace: 'default', taskQueue: env.worker.taskQueue });
    try {
      const run = await sdk.submit({ yaml: twoGroups(runName('sdk-own')), options: quick });
      expect(['SUBMITTED', 'PROVISIONING', 'RUNNING', 'TERMINATING', 'DONE']).toContain((await run.state()).status);
      const final = await run.wait();
      expect(final.status).toBe('DONE');
      expect((await run.readLog(0)).data).toMatch(/^head 0 of 3\n/);
    } finally {
      await sdk.close();
    }
  });

  it('lists active runs, and finished ones with all; a second run of an active name is refused; stop ends it', async () => {
    const name = runName('sdk-live');
    const handle = await env.troupe.submit({ yaml: twoGroups(name, 'echo up; sleep 300'), options: quick });
    const states: RunState[] = [];
    for await (const state of handle.watch({ intervalMs: 200 })) {
      states.push(state);
      // The head echoes and is done; the workers sleep until stopped.
      if (state.jobs.every((j) => j.running_at !== null)) break;
    }
    expect(states[0]?.status).toMatch(/SUBMITTED|PROVISIONING/);
    expect(states.at(-1)?.status).toBe('RUNNING');

    await expect(env.troupe.submit({ yaml: twoGroups(name), options: quick })).rejects.toBeInstanceOf(RunNameInUseError);

    const active = await eventually(async () => (await env.troupe.list()).find((r) => r.name === name));
    expect(active).toMatchObject({ open: true, status: 'RUNNING', backend: 'local', stateError: null, service: null });
    expect(active.groups).toEqual([{ name: 'head', nodes: 1, nodes_range: null }, { name: 'workers', nodes: 2, nodes_range: null }]);
    expect(active.state?.jobs.slice(1).map((j) => j.status)).toEqual(['RUNNING', 'RUNNING']);

    expect(await handle.stop()).toBe(true);
    const final = await handle.wait();
    expect(final).toMatchObject({ status: 'TERMINATED', termination_reason: 'STOPPED_BY_USER' });
    expect(final.jobs.slice(1).map((j) => j.termination_reason)).toEqual(['TERMINATED_BY_USER', 'TERMINATED_BY_USER']);
    expect(await handle.stop()).toBe(false);

    const ended = await eventually(async () => {
      const runs = await env.troupe.list({ all: true });
      return runs.find((r) => r.name === name && !r.open);
    });
    expect(ended).toMatchObject({ status: 'TERMINATED', state: { termination_reason: 'STOPPED_BY_USER' } });
    expect((await env.troupe.list()).some((r) => r.name === name)).toBe(false);
  });

  it('a task has no rollout: its status is null, pause, resume and rollback are refused with the run\'s reason; once ended, said so', async () => {
    const name = runName('sdk-rollout');
    const handle = await env.troupe.submit({ yaml: twoGroups(name, 'sleep 300'), options: quick });
    expect(await handle.rolloutStatus()).toBeNull();
    await expect(handle.pauseRollout()).rejects.toThrow(new TroupeClientError(`service ${name} did not pause its rollout: run ${name} is not a service`));
    await expect(handle.resumeRollout()).rejects.toThrow(`service ${name} did not resume its rollout: run ${name} is not a service`);
    await expect(handle.rollbackRollout()).rejects.toThrow(`service ${name} did not roll back its rollout: run ${name} is not a service`);
    await handle.abort();
    await handle.wait();
    await expect(handle.pauseRollout()).rejects.toThrow(`run ${name} has ended: there is no rollout to pause`);
  });

  it('follows a log while the job writes it, until the run ends', async () => {
    const name = runName('sdk-follow');
    const yaml = [
      'type: task',
      `name: ${name}`,
      'commands:',
      '  - for i in 1 2 3 4 5; do echo "line $i"; sleep 0.4; done',
      '',
    ].join('\n');
    const handle = await env.troupe.submit({ yaml, options: quick });
    const chunks: JobLogChunk[] = [];
    for await (const chunk of handle.streamLogs({ follow: true, pollMs: 200 })) chunks.push(chunk);
    expect(chunks.map((c) => c.data).join('')).toBe('line 1\nline 2\nline 3\nline 4\nline 5\n');
    // Read while it was being written: more than one chunk.
    expect(chunks.length).toBeGreaterThan(1);
    expect((await handle.state()).status).toBe('DONE');
  });

  it('watch and follow ride out a worker restart: unavailable for a while, then the run goes on', async () => {
    const queue = uniqueTaskQueue('sdk-restart');
    let first: Awaited<ReturnType<typeof startTroupeWorker>> | null = await startTroupeWorker({ local: fleet.backend }, queue);
    let second: Awaited<ReturnType<typeof startTroupeWorker>> | null = null;
    const own = new TroupeClient(env.client, { taskQueue: queue, queryTimeoutMs: 1_500 });
    try {
      const name = runName('sdk-restart');
      const yaml = ['type: task', `name: ${name}`, 'commands:', '  - for i in 1 2 3 4 5 6; do echo "tick $i"; sleep 1; done', ''].join('\n');
      const handle = await own.submit({ yaml, options: quick });
      for await (const state of handle.watch({ intervalMs: 200 })) if (state.status === 'RUNNING') break;

      await first.stop();
      first = null;
      const unavailable: Error[] = [];
      const following = collect(handle.streamLogs({ follow: true, pollMs: 300, onUnavailable: (err) => unavailable.push(err) }));
      const watching = (async () => {
        const seen: RunState[] = [];
        for await (const state of handle.watch({ intervalMs: 300, onUnavailable: (err) => unavailable.push(err) })) seen.push(state);
        return seen;
      })();
      await new Promise((r) => setTimeout(r, 3_000));
      expect(unavailable.length).toBeGreaterThan(0);
      expect(unavailable[0]).toBeInstanceOf(RunUnreachableError);
      second = await startTroupeWorker({ local: fleet.backend }, queue);

      const logs = await following;
      expect(logs.get(0)).toBe('tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\n');
      expect((await watching).at(-1)?.status).toBe('DONE');
    } finally {
      await first?.stop();
      await second?.stop();
    }
  });

  it('per-run options override the task: retry off, so a failing job fails the run at once', async () => {
    const name = runName('sdk-opts');
    const yaml = [
      'type: task',
      `name: ${name}`,
      'retry:',
      '  on_events: [error]',
      '  duration: 1h',
      'commands:',
      '  - exit 3',
      '',
    ].join('\n');
    const handle = await env.troupe.submit({ yaml, options: { ...quick, retry: null } });
    const final = await handle.wait();
    expect(final).toMatchObject({ status: 'FAILED', termination_reason: 'JOB_FAILED', submission: 0 });
    expect(final.jobs[0]).toMatchObject({ exit_code: 3, termination_reason: 'CONTAINER_EXITED_WITH_ERROR' });
  });
});

/** Visibility is eventually consistent: poll until the listing shows what we look for. */
async function eventually<T>(probe: () => Promise<T | undefined>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('not seen in time');
    await new Promise((r) => setTimeout(r, 250));
  }
}
